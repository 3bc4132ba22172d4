"""Static diagnostics: stable code, location, required and actual state, remedy
(docs/workflows.md#diagnostic-codes).

`Diagnostics` is what `check_workflow` (and `parse_workflow`) return instead of a result when a
workflow is refused. `format_text` renders them like a compiler:

    wf.yaml:12:7: error[AGL-E003]: permit `permit` was already consumed
      required: a live permit; actual: consumed by the dispatch at 10:9
      help: request a new approval for this proposal ...

and `as_json` gives the same content as JSON-ready data, with the span's end as well as its
start (`end_line`, `end_column`: just after the token's last character). Codes are
`DiagnosticCode` values; the seven of docs/workflows.md#diagnostic-codes are AGL-E001..E007, the
checker adds AGL-E008..E017 and the evidence chain of docs/design.md#evidence AGL-E018..E020.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from protocols.denials import DiagnosticCode
from protocols.workflow.ir import Span

D = DiagnosticCode

TITLES: Final[dict[DiagnosticCode, str]] = {
    D.MISSING_AUTHORITY: "missing authority",
    D.INVALID_PROTOCOL_STATE: "invalid protocol state",
    D.CONSUMED_PERMIT: "use of a consumed permit or handle",
    D.INCOMPATIBLE_BRANCH_OWNERSHIP: "incompatible branch ownership",
    D.UNBOUND_APPROVAL: "unbound approval",
    D.UNSAFE_RETRY: "unsafe retry",
    D.PROTECTED_RACE: "protected write inside a race",
    D.EFFECT_CEILING_EXCEEDED: "effect ceiling exceeded",
    D.UNKNOWN_OPERATION: "unknown operation or resource kind",
    D.NON_EXHAUSTIVE_MATCH: "non-exhaustive match",
    D.LOOP_INVARIANT: "loop changes a resource's protocol state",
    D.PARALLEL_CAPTURE: "owned value captured by more than one parallel branch",
    D.FORGED_VALUE: "forged permit, handle or decision",
    D.UNDEFINED_NAME: "undefined name",
    D.TYPE_MISMATCH: "type mismatch",
    D.INVALID_ARGUMENTS: "arguments do not match the contract",
    D.MALFORMED_WORKFLOW: "malformed workflow",
    D.UNATTESTED_PUBLICATION: "publication without an attestation",
    D.UNBOUND_ATTESTATION: "attestation bound to another report revision or policy",
    D.FOREIGN_RECEIPT: "report may cite a receipt of another question",
}


@dataclass(frozen=True)
class Note:
    message: str
    span: Span | None = None

    def render(self) -> str:
        return self.message if self.span is None else f"{self.message} ({short(self.span)})"


@dataclass(frozen=True)
class Diagnostic:
    """One refusal. `required`/`actual` describe the state the step needs and the one it has."""

    code: DiagnosticCode
    message: str
    span: Span
    help: str
    required: str | None = None
    actual: str | None = None
    notes: tuple[Note, ...] = ()

    @property
    def line(self) -> int:
        return self.span.line

    @property
    def column(self) -> int:
        return self.span.column

    def as_json(self) -> dict[str, object]:
        return {
            "code": self.code.value,
            "title": TITLES[self.code],
            "severity": "error",
            "message": self.message,
            "file": self.span.file,
            **_where(self.span),
            "required": self.required,
            "actual": self.actual,
            "help": self.help,
            "notes": [{"message": n.message, **_where(n.span)} for n in self.notes],
        }

    def render(self) -> str:
        lines = [f"{self.span.where()}: error[{self.code.value}]: {self.message}"]
        if self.required is not None or self.actual is not None:
            lines.append(f"  required: {self.required or '-'}; actual: {self.actual or '-'}")
        lines.extend(f"  note: {note.render()}" for note in self.notes)
        lines.append(f"  help: {self.help}")
        return "\n".join(lines)


def _where(span: Span | None) -> dict[str, object]:
    """A place as JSON: the step path and the region (start, and end exclusive), each None
    when unknown."""
    if span is None:
        return dict.fromkeys(("path", "line", "column", "end_line", "end_column"))
    return {"path": span.path, "line": span.line or None, "column": span.column or None,
            "end_line": span.end_line or None, "end_column": span.end_column or None}


def short(span: Span) -> str:
    """`line:col` for file sources, the step path for builder sources."""
    return f"{span.line}:{span.column}" if span.line else span.path


def _order(diagnostic: Diagnostic) -> tuple[int, int, str, str]:
    span = diagnostic.span
    return (span.line, span.column, span.path, diagnostic.code.value)


@dataclass(frozen=True)
class Diagnostics:
    """A non-empty, ordered (by position) collection of diagnostics for one workflow."""

    items: tuple[Diagnostic, ...]

    def __post_init__(self) -> None:
        if not self.items:
            raise ValueError("Diagnostics needs at least one diagnostic")

    @classmethod
    def of(cls, items: Iterable[Diagnostic]) -> Diagnostics:
        unique: dict[tuple[object, ...], Diagnostic] = {}
        for item in items:
            unique.setdefault((item.code, item.span, item.message), item)
        return cls(tuple(sorted(unique.values(), key=_order)))

    def __iter__(self) -> Iterator[Diagnostic]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(d.code.value for d in self.items)

    def as_json(self) -> list[dict[str, object]]:
        return [d.as_json() for d in self.items]


def format_text(diagnostics: Diagnostics) -> str:
    """Compiler-style text, one block per diagnostic, and a summary line."""
    blocks = [d.render() for d in diagnostics]
    count = len(diagnostics)
    blocks.append(f"{count} error{'s' if count != 1 else ''}")
    return "\n".join(blocks)
