"""Citations point at documents the repository holds, and comments say behaviour, not history.

Every `docs/<file>.md#anchor` in the repository's code, templates and documents (and every
further `#anchor` of the same citation, as in `docs/design.md#permits, #outcomes`) names a file
of `docs/` and an anchor in it: an explicit `<a id="...">` or a heading's GitHub-style slug.
No citation of the design, specification or style documents by section number is left (they
are not in the repository; `scripts/rewrite_citations.py` rewrites them). No comment or
docstring of the code or the templates names a delivery stage or an issue number: it says
what the code does. CHANGELOG.md and bench/HISTORY.md keep history and may.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP = {".venv", "var", "node_modules", ".git"}
HISTORY = {"CHANGELOG.md", "bench/HISTORY.md"}

CITATION = re.compile(r"docs/([\w./-]+?\.md)#([\w-]+)((?:(?:,|;| and) #[\w-]+)*)")
LINK = re.compile(r"\]\(([\w./-]+?\.md)#([\w-]+)\)")
MORE = re.compile(r"#([\w-]+)")
# A section sign after the name of a document the repository does not hold.
OLD = re.compile(r"\b(?:DESIGN|[Ss]pec|SPEC|STYLE)(?:[\s#]|\*)*\u00a7")
BARE = re.compile("\u00a7\\s?\\d")
STANDARD = re.compile(r"RFC|UTS|Schema|I-JSON")
HISTORY_LABEL = re.compile(r"\b(?:stage[\s-]*\d|issues?[\s-]*#?\s*\d+)", re.IGNORECASE)


def files(*suffixes: str) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return sorted(path for line in listed.splitlines()
                  if (path := ROOT / line).suffix in suffixes and path.is_file()
                  and not SKIP.intersection(Path(line).parts))


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def slug(title: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"<[^>]+>", "", title).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    text = path.read_text(encoding="utf-8")
    found = set(re.findall(r"""<a\s+(?:id|name)=["']([\w-]+)["']""", text))
    counts: dict[str, int] = {}
    for title in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.MULTILINE):
        base = slug(title)
        n = counts.get(base, 0)
        counts[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return frozenset(found)


def citations() -> list[tuple[str, int, str, str]]:
    """(file, line, cited document, anchor) for every citation in the repository."""
    found = []
    for path in files(".py", ".html", ".md", ".txt", ".yaml", ".yml"):
        text = path.read_text(encoding="utf-8")
        for match in CITATION.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            doc = "docs/" + match[1]
            found.append((relative(path), line, doc, match[2]))
            found.extend((relative(path), line, doc, more) for more in MORE.findall(match[3]))
        if path.suffix == ".md":
            for match in LINK.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                doc = relative((path.parent / match[1]).resolve())
                found.append((relative(path), line, doc, match[2]))
    return found


def missing(doc: str, anchor: str) -> str | None:
    target = ROOT / doc
    if not target.is_file():
        return f"{doc} does not exist"
    if anchor not in anchors(target):
        return f"{doc} has no anchor #{anchor}"
    return None


def test_the_code_cites_the_design_documents() -> None:
    cited = {doc for _, _, doc, _ in citations()}
    assert {"docs/design.md", "docs/rest-api.md"} <= cited


def test_every_citation_names_a_file_and_an_anchor_that_exist() -> None:
    broken = [f"{where}:{line}: {problem}" for where, line, doc, anchor in citations()
              if (problem := missing(doc, anchor))]
    assert broken == []


def test_no_citation_of_a_document_outside_the_repository_is_left() -> None:
    left = []
    for path in files(".py", ".html", ".md", ".txt", ".yaml", ".yml", ".toml"):
        text = path.read_text(encoding="utf-8")
        for match in OLD.finditer(text):
            left.append(f"{relative(path)}:{text.count(chr(10), 0, match.start()) + 1}")
        for match in BARE.finditer(text):
            before = text[max(0, match.start() - 60):match.start()]
            if not STANDARD.search(before) and not OLD.search(before + "\u00a7"):
                left.append(f"{relative(path)}:{text.count(chr(10), 0, match.start()) + 1}")
    assert left == [], "run scripts/rewrite_citations.py, or cite docs/ by hand"


def test_no_comment_or_docstring_names_a_stage_or_an_issue() -> None:
    named = []
    for path in files(".py", ".html", ".yaml", ".yml"):
        if relative(path) in HISTORY:
            continue
        text = path.read_text(encoding="utf-8")
        for match in HISTORY_LABEL.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            named.append(f"{relative(path)}:{line}: {match[0]!r}")
    assert named == [], "say what the code does, not when or why it was added"


def _script() -> object:
    spec = importlib.util.spec_from_file_location(
        "rewrite_citations", ROOT / "scripts" / "rewrite_citations.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_anchor_the_rewrite_can_write_exists() -> None:
    script = _script()
    targets = [*script.MAPPING.values(), *script.QUALIFIED.values(),  # type: ignore[attr-defined]
               *(t[-1] for t in script.OVERRIDES),  # type: ignore[attr-defined]
               *(t[-1] for t in script.CONTEXT)]  # type: ignore[attr-defined]
    broken = [problem for t in targets if (problem := missing(*t.split("#", 1)))]
    assert broken == []


@pytest.mark.parametrize(("before", "after"), [
    ("(DESIGN \u00a711)", "(docs/design.md#evidence)"),
    ("spec \u00a76.3, \u00a78): a lapsed", "docs/design.md#permits, #outcomes): a lapsed"),
    ("DESIGN \u00a7\u00a76\u20137 say", "docs/design.md#denials, docs/rest-api.md#calls say"),
    ("DESIGN \u00a74-\u00a75", "docs/design.md#concepts, #dispatcher"),
    ("(DESIGN \u00a75 step 3, \u00a76)",
     "(docs/design.md#dispatcher step 3, docs/design.md#denials)"),
    ("DESIGN \u00a75 steps 1-4, spec \u00a77", "docs/design.md#dispatcher steps 1-4"),
    ("spec \u00a77 and \u00a79", "docs/design.md#dispatcher and #budgets"),
    ("(DESIGN\n    \u00a711), issued", "(docs/design.md#evidence), issued"),
    ('DESIGN \u00a74 "Digest"', "docs/design.md#digest"),
    ("{# DESIGN \u00a79 #}", "{# docs/design.md#console #}"),
    ("RFC 8785 \u00a73.2.3", "RFC 8785 \u00a73.2.3"),
    ("docs/design.md#outcomes", "docs/design.md#outcomes"),
])
def test_the_rewrite(before: str, after: str) -> None:
    rewrite = _script().rewrite_text  # type: ignore[attr-defined]
    assert rewrite(before, "x.html") == after
    assert rewrite(after, "x.html") == after


def test_a_comment_made_too_long_is_wrapped_into_its_paragraph() -> None:
    script = _script()
    words = "word " * 17
    lines = [f"    # {words}(docs/design.md#evidence) end\n", "    # next line.\n", "x = 1\n",
             'def f() -> None:\n', f'    """{words}(docs/design.md#evidence) and more."""\n']
    out = script.rewrap(lines, {0, 4}, "x.py")  # type: ignore[attr-defined]
    assert all(len(line.rstrip("\n")) <= script.LIMIT for line in out)  # type: ignore[attr-defined]
    assert out[1] == "    # (docs/design.md#evidence) end next line.\n"
    assert out[-1] == '    (docs/design.md#evidence) and more."""\n'
    def words_of(text: list[str]) -> list[str]:
        return [word for word in "".join(text).split() if word != "#"]

    assert words_of(out) == words_of(lines)
