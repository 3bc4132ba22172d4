"""The core names no demo concept: no Python module of `protocols/`, `dispatch/` or `console/`
names a resource kind or a contract the demo extension registers.

The names are read from the demo's registration (`demo.extension.register` into an empty
runtime), never written out here: a kind or contract the demo adds later is covered at once.

What counts as naming one, in code (docstrings and comments are prose and not read):

- a string literal that is a kind's or a contract's name (`"report"`, `"email.send"`), or,
  written without spaces (a pointer, a dotted path, a key: `"/report/links/question/payload"`,
  `"resource:email_draft"`), has one as a segment between `/`, `:`, `#` or `,`;
- any string literal with a contract's name in it as a token (`"email.send v1"`): a dotted
  name is never an English word;
- an identifier (a name, an attribute, a function, class, argument or keyword) holding a
  multi-word kind (`email_draft`) or a contract name spelled with `_` (`email_send`,
  `report_publish`) as whole `_`-separated words. A one-word kind (`question`, `report`) is
  not matched in identifiers: it is also an English word the core uses for its own concepts
  (`TraceReport`, `ctx.report(...)`).

Migrations are left out: they are generated history and replay the schema as it was.
`STILL_NAMED` lists the modules that still name a demo concept, each with its reason; an
entry a module no longer needs fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from demo import extension
from dispatch.runtime import Runtime
from protocols.contracts import ContractRegistry
from protocols.grants import Policy

ROOT = Path(__file__).resolve().parents[2]
CORE = ("protocols", "dispatch", "console")

#: Modules that still name the research flow's concepts, with why. The receipt and attestation
#: records are the store's (trusted, minted only through the hooks); their models, selectors and the
#: console's evidence pages read them by the resources they bind.
STILL_NAMED: dict[str, str] = {
    "dispatch/models/evidence.py": "the receipt and attestation records of the store",
    "dispatch/selectors/evidence.py": "the console's read of those records",
    "dispatch/api/evidence.py": "the REST serializers of those records",
    "dispatch/services/access.py": "access to a question's evidence timeline",
    "dispatch/services/evidence.py": "the validator's view of a report (attestation_judge)",
    "console/evidence_views.py": "the console's publication and question pages",
    "protocols/contracts.py": "the attestation requirement's declaration, fingerprinted as is",
    "protocols/workflow/compat.py": "the workflow checker's model of the research flow",
    "protocols/workflow/evidence.py": "the workflow checker's model of the research flow",
}


def demo_names() -> tuple[frozenset[str], frozenset[str]]:
    """The kinds and the contracts the demo registers."""
    runtime = Runtime(registry=ContractRegistry(), handlers={},
                      policy=Policy(allowed_effects=frozenset()))
    extension.register(runtime)
    return (frozenset(runtime.resource_kinds),
            frozenset(contract.qualified_name for contract in runtime.registry))


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _identifiers(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name
    elif isinstance(node, ast.arg | ast.keyword) and node.arg is not None:
        yield node.arg
    elif isinstance(node, ast.alias):
        yield node.asname or node.name.rpartition(".")[2]


def names_in(source: str, kinds: frozenset[str], contracts: frozenset[str]) -> list[str]:
    """Each demo name `source` uses in code, as `line: name`, by the rule above."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    segments = kinds | contracts
    tokens = {name: re.compile(rf"(?<![\w.]){re.escape(name)}(?![\w])") for name in contracts}
    words = [name.replace(".", "_") for name in contracts] + [k for k in kinds if "_" in k]
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in prose:
            text = node.value
            parts = set() if " " in text.strip() else set(re.split(r"[/:#,]", text))
            hits = ({text.strip()} | parts) & segments
            hits |= {name for name, token in tokens.items() if token.search(text)}
            found += [f"{line}: {hit!r}" for hit in sorted(hits)]
        for identifier in _identifiers(node):
            wrapped = f"_{identifier.lower()}_"
            found += [f"{line}: {identifier}" for word in words if f"_{word}_" in wrapped]
    return found


def core_modules() -> Iterator[Path]:
    for package in CORE:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def test_the_names_come_from_the_demo_registration() -> None:
    kinds, contracts = demo_names()
    assert {"email_draft", "question", "report"} <= kinds
    assert {"email.send", "report.publish", "evidence.attest"} <= contracts


def test_no_core_module_names_a_demo_kind_or_contract() -> None:
    kinds, contracts = demo_names()
    naming = {}
    for path in core_modules():
        found = names_in(path.read_text(encoding="utf-8"), kinds, contracts)
        if found:
            naming[path.relative_to(ROOT).as_posix()] = found
    unexpected = {path: found for path, found in naming.items() if path not in STILL_NAMED}
    assert not unexpected, "the core names the demo:\n" + "\n".join(
        f"  {path}: {', '.join(found)}" for path, found in sorted(unexpected.items()))
    stale = sorted(set(STILL_NAMED) - set(naming))
    assert not stale, f"no longer name the demo, drop them from STILL_NAMED: {stale}"


def test_the_rule_catches_each_spelling_and_spares_prose() -> None:
    kinds, contracts = frozenset({"email_draft", "report"}), frozenset({"report.publish"})
    caught = names_in('''
def f(report_publish, x):
    """A report, an email_draft: prose."""
    # report.publish in a comment: prose
    a = "report"
    b = "/report/links/question"
    c = "resource:email_draft"
    d = f"run report.publish now"
    e = make_email_draft(kind=x)
    g = x.report  # a one-word kind is an English word in identifiers
    h = "the report was late"
''', kinds, contracts)
    assert caught == ["2: report_publish", "5: 'report'", "6: 'report'", "7: 'email_draft'",
                      "8: 'report.publish'", "9: make_email_draft"]
