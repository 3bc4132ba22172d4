"""Protocol-state and argument checks shared by the action rules (docs/design.md#resources,
docs/workflows.md#typing-rules).

`check_state` is the static counterpart of `lifecycle.transition`: a step may take an event only
from a state the resource's protocol table declares for it. `schema_problems` checks a
proposal's argument names against the contract's input type and its literal values against
their property schemas; resource arguments are validated at dispatch against the snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping

from protocols.contracts import OperationContract, compile_schema, schema_errors
from protocols.denials import DiagnosticCode
from protocols.lifecycle import ResourceEvent, sources
from protocols.workflow.context import Ctx
from protocols.workflow.diagnostics import Note
from protocols.workflow.env import Conflicted, Resource, Tagged
from protocols.workflow.ir import Expr, Literal, Span

D = DiagnosticCode


def check_state(ctx: Ctx, resource: Resource, event: ResourceEvent, span: Span,
                what: str) -> bool:
    """Report unless `resource` is in a plain state from which `event` is declared."""
    protocol = ctx.kinds[resource.protocol]
    allowed = sorted(str(s) for s in sources(protocol, event))
    required = f"{resource.protocol} in state {' | '.join(allowed)}"
    if not _settled(ctx, resource, span, what, required, f"is {allowed[0]}"):
        return False
    state = plain_state(resource)
    notes = [] if resource.changed_at is None else [Note("state set here", resource.changed_at)]
    if not protocol.allows(state, event):
        ctx.report(D.INVALID_PROTOCOL_STATE,
                   f"{what}: `{resource.label}` is {state}; `{event.value}` is not "
                   "allowed", span, _state_help(event), required=required, actual=state,
                   notes=notes)
        return False
    return True


def check_settled(ctx: Ctx, resource: Resource, span: Span, what: str) -> bool:
    """Report unless `resource` is in a plain state: what a read needs (any state will do)."""
    return _settled(ctx, resource, span, what, f"{resource.protocol} in a known state",
                    "has a known state")


def _settled(ctx: Ctx, resource: Resource, span: Span, what: str, required: str,
             where: str) -> bool:
    state = resource.state
    label = "paths join here" if isinstance(state, Conflicted) else "state set here"
    notes = [] if resource.changed_at is None else [Note(label, resource.changed_at)]
    if isinstance(state, Conflicted):
        ctx.report(D.INCOMPATIBLE_BRANCH_OWNERSHIP,
                   f"{what}: `{resource.label}` is not available after the join", span,
                   "bring it to the same state on every path, or match on a tagged outcome "
                   "and continue inside the arms", required=required, actual=str(state),
                   notes=notes)
        return False
    if isinstance(state, Tagged):
        ctx.report(D.INVALID_PROTOCOL_STATE,
                   f"{what}: the state of `{resource.label}` depends on `{state.name}`", span,
                   f"match on `{state.name}` and continue in the arm where `{resource.label}` "
                   f"{where}", required=required, actual=str(state), notes=notes)
        return False
    return True


def plain_state(resource: Resource) -> str:
    """The state of a resource `check_state` accepted: always a plain protocol state."""
    assert isinstance(resource.state, str)
    return resource.state


def _state_help(event: ResourceEvent) -> str:
    if event is ResourceEvent.CLAIM:
        return ("dispatch only in the Granted arm of a match on the approval decision of this "
                "proposal; a boolean or a denial never authorizes")
    if event is ResourceEvent.PROPOSE:
        return "propose from a draft: edit the resource to start a new revision if needed"
    if event is ResourceEvent.EDIT:
        return "a resource whose action may have run cannot be edited; create a new one"
    return "request approval of a proposal made against the resource's current revision"


def schema_problems(contract: OperationContract,
                    args: tuple[tuple[str, Expr], ...]) -> list[tuple[str, str, Span | None]]:
    """(message, pointer, span of the argument if any) for each problem known statically."""
    schema: Mapping[str, object] = contract.input_type
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    required = schema.get("required")
    names = {name for name, _ in args}
    problems: list[tuple[str, str, Span | None]] = [
        (f"missing required argument `{name}`", f"/{name} is missing", None)
                for name in (required if isinstance(required, list) else [])
                if name not in names]
    closed = schema.get("additionalProperties") is False
    for name, expr in args:
        if name not in properties:
            if closed:
                problems.append((f"unknown argument `{name}`", f"/{name} is not allowed",
                                 expr.span))
            continue
        sub = properties[name]
        if isinstance(expr, Literal) and isinstance(sub, Mapping) and (
                name not in contract.protocol_preconditions):
            try:
                validator = compile_schema(sub)
            except Exception:  # noqa: S112 - a sub-schema that cannot stand alone: dispatch checks
                continue
            for error in schema_errors(validator, expr.value, root=f"/{name}"):
                problems.append((f"argument `{name}`: {error['message']}", error["pointer"],
                                 expr.span))
    return problems
