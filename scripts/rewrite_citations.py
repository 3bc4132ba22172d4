"""Rewrite citations of design documents the repository does not hold to the anchors of `docs/`.

The code once cited a design file, a specification and a style guide by section number; none of
them is in the repository. This script replaces every such citation (the document's name, a
section sign and one or more section numbers, e.g. a range or a list) with the `docs/` file and
anchor that now says the same thing: `docs/design.md#outcomes`, several as
`docs/design.md#permits, #outcomes`. It touches nothing else. In Python files a comment or
docstring line the rewrite makes longer than 100 characters is re-wrapped into the lines of its
own paragraph; a string literal it would make too long is reported, not changed.

Idempotent: a second run finds no citation and changes nothing. Run from anywhere:

    python scripts/rewrite_citations.py [--check] [PATH ...]
    python scripts/rewrite_citations.py --wrap PATH ...

`--check` changes nothing and exits 1 when something would change. `--wrap` only re-wraps the
comment and docstring lines of the given Python files that are over the limit (after a rewrite
by hand, say). `tests/unit/
test_citations.py` fails on any citation left, and on any `docs/…#anchor` that does not exist.
"""

from __future__ import annotations

import argparse
import fnmatch
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 100
SUFFIXES = (".py", ".html", ".md", ".txt", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".sh")
SKIP_PARTS = {".venv", "var", "node_modules", ".git"}

D = "docs/design.md#"
R = "docs/rest-api.md#"
W = "docs/workflows.md#"

#: (document, section) -> the anchor that holds it now. A subsection missing here falls back to
#: its section ("6.4" to "6"). Documents: DESIGN (the team's design), SPEC (the behavioural
#: contracts specification), STYLE (the code style guide).
MAPPING: dict[tuple[str, str], str] = {
    ("DESIGN", "1"): D + "guarantee",
    ("DESIGN", "2"): D + "principals",
    ("DESIGN", "3"): D + "layout",
    ("DESIGN", "4"): D + "concepts",
    ("DESIGN", "5"): D + "dispatcher",
    ("DESIGN", "6"): D + "denials",
    ("DESIGN", "7"): R + "calls",
    ("DESIGN", "8"): D + "demo",
    ("DESIGN", "9"): D + "console",
    ("DESIGN", "10"): D + "running",
    ("DESIGN", "11"): D + "evidence",
    ("DESIGN", "12"): D + "not-built",
    ("DESIGN", "13"): D + "not-built",
    ("DESIGN", "14"): D + "not-built",
    ("DESIGN", "15"): D + "not-built",
    ("SPEC", "1"): D + "guarantee",
    ("SPEC", "2"): D + "assumptions",
    ("SPEC", "3"): D + "guarantee",
    ("SPEC", "4"): D + "contracts",
    ("SPEC", "4.3"): D + "grants",
    ("SPEC", "5"): D + "resources",
    ("SPEC", "5.2"): W + "typing-rules",
    ("SPEC", "5.3"): D + "tool-sets",
    ("SPEC", "6"): D + "approvals",
    ("SPEC", "6.1"): D + "permits",
    ("SPEC", "6.2"): D + "canonical-encoding",
    ("SPEC", "6.3"): D + "permits",
    ("SPEC", "7"): D + "dispatcher",
    ("SPEC", "8"): D + "outcomes",
    ("SPEC", "9"): D + "budgets",
    ("SPEC", "10"): D + "extensions",
    ("SPEC", "11"): D + "evidence",
    ("SPEC", "12"): D + "audit",
    ("SPEC", "13"): D + "how-it-is-tested",
    ("SPEC", "14"): D + "extensions",
    ("SPEC", "14.5"): D + "reconciliation",
    ("SPEC", "15"): D + "guarantee",
    ("STYLE", "1"): D + "pure-core",
    ("STYLE", "2"): D + "one-write-path",
    ("STYLE", "3"): D + "choke-points",
    ("STYLE", "4"): D + "database-invariants",
    ("STYLE", "5"): D + "after-commit",
}

#: A section named by a quoted heading after its number: the quote goes with the citation.
QUALIFIED: dict[tuple[str, str, str], str] = {
    ("DESIGN", "4", "Digest"): D + "digest",
    ("DESIGN", "11", "Bounded delegation"): D + "delegation",
}

#: Where a file's subject says better which part of a section it means:
#: (glob of the path, document, section) -> anchor. The first match wins, before `CONTEXT`.
OVERRIDES: list[tuple[str, str, str, str]] = [
    ("bench/*", "DESIGN", "5", D + "write-transactions"),
    ("docs/benchmarks.md", "DESIGN", "5", D + "write-transactions"),
    ("*renewal*", "SPEC", "6.3", D + "renewals"),
    ("*renewal*", "SPEC", "8", D + "renewals"),
    ("*cancel*", "DESIGN", "5", D + "cancellation"),
    ("*cancel*", "SPEC", "9", D + "cancellation"),
    ("*delegat*", "DESIGN", "11", D + "delegation"),
    ("*reconcil*", "SPEC", "8", D + "reconciliation"),
    ("*reconcil*", "DESIGN", "5", D + "reconciliation"),
    ("*attempts*", "DESIGN", "5", D + "retries"),
    ("*budget*", "DESIGN", "5", D + "budgets"),
    ("*claims*", "DESIGN", "5", D + "claim"),
    ("*statements*", "DESIGN", "5", D + "write-transactions"),
    ("protocols/workflow/*", "SPEC", "12", W + "diagnostic-codes"),
    ("tests/workflows/*", "SPEC", "12", W + "diagnostic-codes"),
    ("*check_workflow*", "SPEC", "12", W + "diagnostic-codes"),
    ("protocols/workflow/*", "SPEC", "9", W + "typing-rules"),
    ("tests/workflows/*", "SPEC", "9", W + "typing-rules"),
    ("docs/workflows.md", "SPEC", "9", W + "typing-rules"),
    ("protocols/workflow/*", "SPEC", "6.3", W + "typing-rules"),
    ("tests/workflows/*", "SPEC", "6.3", W + "typing-rules"),
    ("protocols/workflow/*", "SPEC", "6.1", W + "typing-rules"),
    ("tests/workflows/*", "SPEC", "6.1", W + "typing-rules"),
]

#: What the words around a citation (in a comment, a docstring or a document, not in a string
#: literal) say it means: (document, section, pattern within 100 characters, anchor).
CONTEXT: list[tuple[str, str, str, str]] = [
    ("DESIGN", "11", r"delegated|delegation|sub-agent|subagent|carve", D + "delegation"),
    ("DESIGN", "5", r"sticky|uncertain", D + "outcomes"),
    ("DESIGN", "5", r"cancel", D + "cancellation"),
    ("DESIGN", "5", r"retry|retries|attempt_next|further attempt", D + "retries"),
    ("DESIGN", "5", r"round trip|write transaction|hot.path", D + "write-transactions"),
    ("DESIGN", "5", r"budget|reserv", D + "budgets"),
    ("DESIGN", "5", r"reconcil", D + "reconciliation"),
    ("DESIGN", "5", r"BEGIN IMMEDIATE|across processes|one transaction", D + "claim"),
    ("DESIGN", "4", r"principal|tenant", D + "principals"),
    ("DESIGN", "4", r"grant|delegat", D + "grants"),
    ("DESIGN", "4", r"digest|canon", D + "canonical-encoding"),
    ("DESIGN", "4", r"revision|resource kind", D + "resources"),
    ("DESIGN", "4", r"proposal|snapshot", D + "proposals"),
    ("DESIGN", "4", r"permit", D + "permits"),
    ("DESIGN", "4", r"audit", D + "audit"),
    ("DESIGN", "4", r"contract|fingerprint", D + "contracts"),
    ("DESIGN", "4", r"operation|attempt", D + "operations"),
    ("DESIGN", "7", r"every right", D + "principals"),
    ("DESIGN", "7", r"call.id", R + "proposal"),
    ("DESIGN", "7", r"lowercase", R + "states"),
    ("SPEC", "8", r"renew", D + "renewals"),
    ("SPEC", "6.3", r"renew", D + "renewals"),
    ("SPEC", "8", r"reconcil|lookup", D + "reconciliation"),
    ("SPEC", "8", r"retry|retries|repeat", D + "retries"),
    ("SPEC", "9", r"cancel", D + "cancellation"),
    ("SPEC", "12", r"diagnostic|span", W + "diagnostic-codes"),
    ("SPEC", "13", r"assumption", D + "assumptions"),
]

_NUMBER = r"\d+(?:\.\d+)*"
# The document's name, then (across a line break and a comment's `#`, if need be) a section sign,
# the first number, and any further numbers joined by a comma, "and", "or", "/" or a dash (a
# range); a further number keeps its own section sign unless it closes a range.
CITATION = re.compile(
    r"\b(?P<doc>DESIGN|[Ss]pec|SPEC|STYLE)(?:[ \t]*\n[ \t]*(?:#[ \t]*)?|[ \t]*)"
    r"(?P<signs>§§?)[ \t]*(?P<first>" + _NUMBER + r")"
    r"(?P<step>[ \t]+steps?[ \t]+\d+(?:[ \t]*[-–][ \t]*\d+)?)?"
    r"(?P<rest>(?:(?:[ \t]*(?:,|\band\b|\bor\b|/)[ \t]*(?:\n[ \t]*(?:#[ \t]*)?)?§[ \t]*"
    + _NUMBER + r")|(?:[ \t]*[-–][ \t]*§?[ \t]*" + _NUMBER + r"))*)"
    r"(?:[ \t]+\"(?P<quoted>[^\"\n]{1,40})\")?"
)
_JOINED = re.compile(r"(,|\band\b|\bor\b|/|[-–])[ \t\n#]*§?[ \t]*(" + _NUMBER + r")")


def target(doc: str, section: str, path: str, around: str = "") -> str:
    for glob, o_doc, o_section, anchor in OVERRIDES:
        if o_doc == doc and o_section == section and fnmatch.fnmatch(path, glob):
            return anchor
    for c_doc, c_section, pattern, anchor in CONTEXT:
        if c_doc == doc and c_section == section and re.search(pattern, around, re.IGNORECASE):
            return anchor
    probe = section
    while True:
        if (doc, probe) in MAPPING:
            return MAPPING[(doc, probe)]
        if "." not in probe:
            raise KeyError(f"{path}: no anchor for {doc} section {section}")
        probe = probe.rsplit(".", 1)[0]


def sections(match: re.Match[str]) -> tuple[list[str], str]:
    """The sections a citation names, ranges expanded, and how the last two were joined."""
    found = [match["first"]]
    joiner = ","
    for sep, number in _JOINED.findall(match["rest"] or ""):
        joiner = sep
        if sep in "-–" and "." not in number and "." not in found[-1]:
            found.extend(str(n) for n in range(int(found[-1]) + 1, int(number) + 1))
        else:
            found.append(number)
    return found, joiner


def replacement(match: re.Match[str], path: str, around: str = "") -> str:
    doc = match["doc"].upper()
    numbers, joiner = sections(match)
    quoted = match["quoted"]
    anchors: list[str] = []
    if quoted and len(numbers) == 1 and (doc, numbers[0], quoted) in QUALIFIED:
        anchors.append(QUALIFIED[(doc, numbers[0], quoted)])
        quoted = None
    else:
        for index, number in enumerate(numbers):
            # A numbered step ("step 3") is one of its section's own list: the default anchor.
            stepped = index == 0 and match["step"]
            anchor = target(doc, number, "" if stepped else path, "" if stepped else around)
            if anchor not in anchors:
                anchors.append(anchor)
    parts: list[str] = []
    previous_file = None
    for anchor in anchors:
        file, _, name = anchor.partition("#")
        parts.append(f"#{name}" if file == previous_file else anchor)
        previous_file = file
        if match["step"] and len(parts) == 1:
            # "step 3" belongs to the first section; what follows names its file again.
            parts[0] += " " + match["step"].strip()
            previous_file = None
    text = " and ".join(parts) if joiner == "and" and len(parts) == 2 else ", ".join(parts)
    if quoted:
        text += f' "{quoted}"'
    return text


def rewrite_text(text: str, path: str) -> str:
    """`text` with every citation rewritten. Inside a Python string literal other than a
    docstring (a message, an expected value in a test) only the default mapping applies, so
    that the same words rewrite alike in the code and in the test that quotes them."""
    literals = _literal_spans(text) if path.endswith(".py") else []

    def one(match: re.Match[str]) -> str:
        if any(start <= match.start() < end for start, end in literals):
            return replacement(match, "")
        around = text[max(0, match.start() - 100):match.end() + 100]
        return replacement(match, path, around)

    return _merge(CITATION.sub(one, text))


_ADJACENT = re.compile(r"(docs/([\w/-]+)\.md#[\w-]+(?:, #[\w-]+)*)(,|;| and) docs/\2\.md#")
_REPEATED = re.compile(r"(#[\w-]+)((?:, #[\w-]+)*), \1\b")
_STEP_REPEATED = re.compile(r"(docs/[\w/-]+\.md#[\w-]+)( steps? [\d–-]+), \1\b(?!-)")


def _merge(text: str) -> str:
    """Citations of one file side by side read as one: `docs/design.md#permits, #outcomes`."""
    while True:
        merged = _REPEATED.sub(r"\1\2", _ADJACENT.sub(r"\1\3 #", text))
        merged = _STEP_REPEATED.sub(r"\1\2", merged)
        if merged == text:
            return text
        text = merged


def _literal_spans(source: str) -> list[tuple[int, int]]:
    """Character spans of the string literals of `source` that are not docstrings."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    significant = [t for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL)]
    spans = []
    for index, token in enumerate(significant):
        if token.type != tokenize.STRING or _is_docstring(significant, index):
            continue
        spans.append((starts[token.start[0] - 1] + token.start[1],
                      starts[token.end[0] - 1] + token.end[1]))
    return spans


def _is_docstring(significant: list[tokenize.TokenInfo], index: int) -> bool:
    before = significant[index - 1].type if index else tokenize.ENCODING
    after = significant[index + 1].type if index + 1 < len(significant) else tokenize.NEWLINE
    return before in (tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE, tokenize.ENCODING) \
        and after in (tokenize.NEWLINE, tokenize.ENDMARKER)


# --- re-wrapping Python comments and docstrings ------------------------------------------------


def _spans(source: str) -> tuple[set[int], dict[int, tuple[int, int]]]:
    """Lines (1-based) that are comments, and for each docstring line its docstring's span."""
    comments: set[int] = set()
    docstrings: dict[int, tuple[int, int]] = {}
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    significant = [t for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL)]
    for token in tokens:
        if token.type == tokenize.COMMENT:
            comments.add(token.start[0])
    for index, token in enumerate(significant):
        if token.type == tokenize.STRING and _is_docstring(significant, index):
            for line in range(token.start[0], token.end[0] + 1):
                docstrings[line] = (token.start[0], token.end[0])
    return comments, docstrings


_ITEM = re.compile(r"(?:[-*]|\d+\.)\s")


def _split_at(line: str, start: int) -> int | None:
    """The index of the last space at or before the limit where the line may break: after
    `start`, not inside inline code, and not before a word that continues a citation
    (`#anchor`)."""
    for index in range(min(len(line) - 1, LIMIT), start, -1):
        if line[index] == " " and line[index - 1] != " " and \
                not line[index + 1:].startswith("#") and line[:index].count("`") % 2 == 0:
            return index
    return None


def _comment_prefix(line: str) -> str | None:
    match = re.match(r"^([ \t]*#:?[ \t]*)\S", line)
    return match.group(1) if match else None


def rewrap(lines: list[str], changed: set[int], path: str) -> list[str]:
    """Re-wrap each changed comment or docstring line (0-based) over the limit into the next
    lines of its paragraph."""
    source = "".join(lines)
    try:
        comments, docstrings = _spans(source)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return lines
    out = list(lines)
    offset = 0
    for number in sorted(changed):
        index = number + offset
        line = out[index].rstrip("\n")
        if len(line) <= LIMIT:
            continue
        lineno = number + 1
        if lineno in comments and _comment_prefix(line) is not None and \
                line.lstrip().startswith("#"):
            prefix = _comment_prefix(line) or "# "
            body = line[len(prefix):]
            item_indent = "  " if _ITEM.match(body) else ""
            start = len(prefix)
            follow = prefix + item_indent

            def continues(nxt: str, prefix: str = prefix) -> bool:
                p = _comment_prefix(nxt)
                return p is not None and len(p.rstrip(" ")) == len(prefix.rstrip(" ")) and \
                    nxt.startswith(prefix.rstrip(" ")) and not _ITEM.match(nxt[len(p):])
        elif lineno in docstrings:
            first, last = docstrings[lineno]
            stripped = line.lstrip()
            start = len(line) - len(stripped)
            indent = line[:start]
            if lineno == first:
                start += 3
                opening = out[first - 1 + offset]
                indent = opening[:len(opening) - len(opening.lstrip())]
            # A list item's further lines are indented under its text.
            follow = indent + ("  " if _ITEM.match(line[start:]) else "")

            def continues(nxt: str, indent: str = follow) -> bool:
                body = nxt[len(indent):]
                return nxt.startswith(indent) and bool(body.strip()) and \
                    not body.startswith((" ", '"""', "'''")) and not _ITEM.match(body)
            last_index = last - 1 + offset
        else:
            print(f"{path}:{lineno}: over {LIMIT} characters, not a comment or docstring: "
                  "shorten it by hand", file=sys.stderr)
            continue
        rule = re.search(r" ([-=])\1{2,}$", line)
        if rule and len(line) - LIMIT <= len(rule.group(0)) - 4:
            # A section rule ("# --- name ------"): shorten the rule, keep one line.
            line = line[:LIMIT]
            out[index] = line + "\n"
        while len(line) > LIMIT:
            cut = _split_at(line, start)
            if cut is None:
                print(f"{path}:{index + 1}: cannot wrap", file=sys.stderr)
                break
            head, tail = line[:cut], line[cut + 1:]
            out[index] = head + "\n"
            nxt_index = index + 1
            in_block = lineno in comments or nxt_index <= last_index
            nxt = out[nxt_index].rstrip("\n") if nxt_index < len(out) else ""
            ends = tail.endswith(('"""', "'''"))
            if in_block and not ends and nxt_index < len(out) and continues(nxt):
                rest = nxt[len(follow):] if nxt.startswith(follow) else nxt.lstrip(" #")
                line = follow + tail + " " + rest
                out[nxt_index] = line + "\n"
            else:
                line = follow + tail
                out.insert(nxt_index, line + "\n")
                offset += 1
                if lineno in docstrings:
                    last_index += 1
            index = nxt_index
            start = len(follow)
    return out


def rewrite_file(path: Path, *, check: bool) -> bool:
    relative = path.relative_to(ROOT).as_posix()
    text = path.read_text(encoding="utf-8")
    if "§" not in text:
        return False
    new = rewrite_text(text, relative)
    if new == text:
        return False
    if path.suffix == ".py":
        old_lines = text.splitlines(keepends=True)
        new_lines = new.splitlines(keepends=True)
        changed = _changed_lines(old_lines, new_lines)
        new = "".join(rewrap(new_lines, changed, relative))
    if not check:
        path.write_text(new, encoding="utf-8")
    print(relative)
    return True


def _changed_lines(old: list[str], new: list[str]) -> set[int]:
    import difflib

    changed: set[int] = set()
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            changed.update(range(j1, j2))
    return changed


def candidates() -> list[Path]:
    try:
        # git from PATH, as the person running this script would call it
        listed = subprocess.run(["git", "ls-files", "--cached", "--others",  # noqa: S607
                                 "--exclude-standard"],
                                cwd=ROOT, capture_output=True, text=True, check=True).stdout
        paths = [ROOT / line for line in listed.splitlines()]
    except (OSError, subprocess.CalledProcessError):
        paths = list(ROOT.rglob("*"))
    return sorted(p for p in paths
                  if p.suffix in SUFFIXES and p.is_file()
                  and not SKIP_PARTS.intersection(p.relative_to(ROOT).parts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if needed")
    parser.add_argument("--wrap", action="store_true",
                        help="only re-wrap over-long comment and docstring lines of PATHs")
    args = parser.parse_args(argv)
    if args.wrap:
        for path in args.paths:
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
            long = {i for i, line in enumerate(lines) if len(line.rstrip("\n")) > LIMIT}
            if long:
                path.write_text("".join(rewrap(lines, long, str(path))), encoding="utf-8")
        return 0
    paths = [p.resolve() for p in args.paths] or candidates()
    changed = [p for p in paths if rewrite_file(p, check=args.check)]
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
