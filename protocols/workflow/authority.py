"""Static authority: required grant kinds and, where values are known, scope (docs/design.md#grants,
docs/workflows.md#typing-rules).

The workflow declares the authority it runs under (`authority:`); the caller may also pass the
deployment's grants. An operation is covered when a declaration (and, if grants were passed, a
grant that is not revoked) names the operation and every authority key of its contract, and
allows each key's value whenever the arguments make that value statically known (a literal, or
the literal payload of a resource the workflow created). Validity intervals are checked at
dispatch, not here: the checker has no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from protocols.contracts import OperationContract
from protocols.denials import DiagnosticCode
from protocols.grants import ANY, Scope
from protocols.workflow.context import Ctx
from protocols.workflow.diagnostics import Note
from protocols.workflow.ir import Span

UNKNOWN = object()
"""A value not known statically: the scope check for its key is left to the dispatcher."""


def select(contract: OperationContract, known: Mapping[str, object]) -> dict[str, str | None]:
    """Authority key -> the value the arguments select, `None` when not statically known."""
    selected: dict[str, str | None] = {}
    for requirement in contract.authority_requirements:
        value = _walk(dict(known), requirement.pointer)
        selected[requirement.key] = value if isinstance(value, str) else None
    return selected


def _walk(value: object, pointer: str) -> object:
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, Mapping) and token in value:
            value = value[token]
        elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        else:
            return UNKNOWN
    return value


def covers(operations: Iterable[str], scope: Scope, operation: str,
           selected: Mapping[str, str | None]) -> bool:
    """Whether (operations, scope) covers `operation` for the selected key values."""
    names = frozenset(operations)
    if ANY not in names and operation not in names:
        return False
    for key, value in selected.items():
        allowed = scope.get(key)
        if allowed is None:
            return False
        if value is not None and allowed != ANY and value not in allowed:
            return False
    return True


def _flow(scope: Scope) -> str:
    """A scope in YAML flow style: `{mailbox: [a@x], customer: "*"}`."""
    parts = [f"{key}: " + ('"*"' if value == ANY else f"[{', '.join(sorted(value))}]")
             for key, value in sorted(scope.items())]
    return "{" + ", ".join(parts) + "}"


def _requirement(operation: str, selected: Mapping[str, str | None]) -> str:
    keys = ", ".join(f"{k}={v if v is not None else '<any>'}" for k, v in sorted(selected.items()))
    return f"a grant for {operation}" + (f" with scope {keys}" if keys else "")


def check_authority(ctx: Ctx, contract: OperationContract, known: Mapping[str, object],
                    span: Span, what: str) -> bool:
    """Report AGL-E001 unless the declared authority (and grants, if given) cover `contract`."""
    name = contract.qualified_name
    selected = select(contract, known)
    declared = any(covers(a.operations, a.scope, name, selected) for a in ctx.authority)
    granted = ctx.grants is None or any(
        covers(g.operations, g.scope, name, selected)
        for g in ctx.grants if g.revoked_at is None)
    if declared and granted:
        return True
    have = "; ".join(f"{', '.join(sorted(a.operations))} over {_flow(a.scope)}"
                     for a in ctx.authority) or "nothing declared"
    wanted: Scope = {k: ANY if v is None else frozenset({v}) for k, v in selected.items()}
    fix = (f"declare it under `authority:`: {{operations: [{name}], scope: {_flow(wanted)}}}"
           if not declared else "ask an admin for a grant that covers it")
    ctx.report(
        DiagnosticCode.MISSING_AUTHORITY, f"{what} needs authority the workflow does not hold",
        span, fix, required=_requirement(name, selected),
        actual=have if not declared else "no live deployment grant covers it",
        notes=[Note(f"authority keys of {name}: "
                    f"{', '.join(r.key for r in contract.authority_requirements) or 'none'}")])
    return False
