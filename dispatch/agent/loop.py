"""The agent loop: every tool call passes the dispatcher; the transcript is persisted before
the loop continues; a restarted loop resumes pending calls from the transcript and never asks
the model again for an action it already proposed (spec §8)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from dispatch.agent.adapters import FinalAnswer, ModelAdapter, ToolCall, ToolSpec
from dispatch.failpoints import failpoint
from dispatch.handlers import HandlerContext
from dispatch.models import (
    ApprovalRequest,
    Execution,
    Operation,
    Principal,
    Resource,
    TranscriptEntry,
)
from dispatch.runtime import get_runtime
from dispatch.services.access import resource_kinds_of
from dispatch.services.cancellation import proposal_cancel
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.execution import operation_execute
from dispatch.services.proposals import proposal_create
from dispatch.services.resources import resource_create
from protocols.denials import Denial
from protocols.lifecycle import RESOURCE_PROTOCOLS, ResourceEvent, ResourceState

RESOURCE_TOOL = "resources.create"
Status = Literal["completed", "no_effect", "unknown", "denied"]
_SETTLED: dict[str, Status] = {
    "completed": "completed", "reconciled_completed": "completed",
    "failed_no_effect": "no_effect", "reconciled_no_effect": "no_effect", "unknown": "unknown",
}


@dataclass(frozen=True)
class ToolOutcome:
    """A typed outcome of one tool call, as the model receives it back."""

    status: Status
    code: str | None = None
    message: str = ""
    result: Any = None
    proposal_id: str | None = None
    operation_id: str | None = None


@dataclass(frozen=True)
class RunResult:
    execution_id: str
    state: Literal["waiting", "finished"]
    outcomes: list[ToolOutcome] = field(default_factory=list)
    final: str = ""


def execution_open(*, principal: Principal, adapter: ModelAdapter, now: datetime) -> Execution:
    return Execution.objects.create(
        tenant_id=principal.tenant_id, principal=principal, adapter=adapter.name,
        state=Execution.State.RUNNING, created_at=now, updated_at=now,
    )


def advertised_tools(principal: Principal) -> list[ToolSpec]:
    """The agent's tool set, less tools no resource of its can currently be used with; the
    resource tool only for the kinds its tools take."""
    runtime = get_runtime()
    kinds = sorted(resource_kinds_of(principal))
    tools = [ToolSpec(RESOURCE_TOOL, f"Create a resource ({', '.join(kinds)}) to act on later.",
                      {"type": "object", "required": ["kind", "payload"],
                       "properties": {"kind": {"enum": kinds}}})] if kinds else []
    for name in sorted(principal.tools):
        try:
            contract = runtime.contract(name)
        except Denial:
            continue
        usable = all(_any_resource_allows(principal, kind, ResourceEvent.PROPOSE)
                     for kind in contract.protocol_preconditions.values())
        if usable:
            tools.append(ToolSpec(name, f"{name} v{contract.contract_version}",
                                  contract.input_type))
    return tools


def _any_resource_allows(principal: Principal, kind: str, event: ResourceEvent) -> bool:
    protocol = RESOURCE_PROTOCOLS[kind]
    states = [s.value for s in ResourceState if protocol.allows(s, event)]
    return Resource.objects.filter(tenant_id=principal.tenant_id, kind=kind,
                                   created_by=principal, state__in=states).exists()


def execution_run(
    *, execution_id: str, adapter: ModelAdapter, mode: Literal["inline", "worker"] = "inline",
    max_turns: int = 100, clock: Callable[[], datetime] = timezone.now,
) -> RunResult:
    """Run until the model finishes or a call waits for a human or a worker; resumable."""
    execution = Execution.objects.select_related("principal").get(id=execution_id)
    principal = execution.principal
    for _ in range(max_turns):
        entries = _transcript(execution)
        if entries and entries[-1]["kind"] == TranscriptEntry.Kind.FINAL:
            return _result(execution, "finished", entries)
        pending = _pending_call(entries)
        if pending is not None:
            outcome = _advance(execution, principal, pending, mode, clock())
            if outcome is None:
                _set_state(execution, Execution.State.WAITING, clock())
                return _result(execution, "waiting", entries)
            _append(execution, TranscriptEntry.Kind.TOOL_RESULT, pending["call_id"],
                    asdict(outcome), clock())
            continue
        # Only now, with nothing pending, is the model asked for its next action.
        action = adapter.next_action(entries, advertised_tools(principal))
        if isinstance(action, FinalAnswer):
            _append(execution, TranscriptEntry.Kind.FINAL, "", {"text": action.text}, clock())
            _set_state(execution, Execution.State.FINISHED, clock(), final=action.text)
            continue
        call_id = f"call-{len([e for e in entries if e['kind'] == 'tool_call']) + 1}"
        _append(execution, TranscriptEntry.Kind.TOOL_CALL, call_id, _call_payload(action),
                clock())
    raise RuntimeError(f"execution {execution_id} exceeded {max_turns} turns")


def _call_payload(action: ToolCall) -> dict[str, Any]:
    return {"name": action.name, "arguments": action.arguments, "label": action.label,
            "claims": dict(action.claims)}


def _advance(
    execution: Execution, principal: Principal, call: dict[str, Any],
    mode: Literal["inline", "worker"], now: datetime,
) -> ToolOutcome | None:
    """Take a persisted call one step further; None while it waits for a human or worker."""
    payload = call["payload"]
    try:
        if payload["name"] == RESOURCE_TOOL:
            return _create_resource(principal, payload["arguments"], now)
        proposal = proposal_create(principal=principal, operation=payload["name"],
                                   arguments=payload["arguments"], execution_id=execution.id,
                                   call_id=call["call_id"], now=now)
        failpoint("agent.after_proposal")
        if payload["claims"]:
            return _refuse_model_claims(principal, proposal, payload["claims"], now)
        operation = Operation.objects.filter(proposal_id=proposal.id).first()
        if operation is None:
            approval = ApprovalRequest.objects.filter(proposal_id=proposal.id).first()
            if approval is not None and approval.state == "pending" and now < approval.expires_at:
                return None
            operation = proposal_dispatch(principal=principal, proposal_id=proposal.id, now=now,
                                          enqueue=mode == "worker")
        if operation.state == "claimed" and mode == "inline":
            operation = operation_execute(operation_id=operation.id)
        if operation.state == "claimed":
            return None
        return ToolOutcome(status=_SETTLED[operation.state], result=operation.result,
                           proposal_id=proposal.id, operation_id=operation.id,
                           message=operation.evidence)
    except Denial as denial:
        return ToolOutcome(status="denied", code=denial.code.value, message=denial.message)


def _create_resource(principal: Principal, arguments: Any, now: datetime) -> ToolOutcome:
    if not isinstance(arguments, dict):
        arguments = {}
    resource, revision = resource_create(principal=principal, kind=arguments.get("kind"),
                                         payload=arguments.get("payload"), now=now)
    return ToolOutcome(status="completed", result={"id": resource.id, "revision": revision.number})


def _refuse_model_claims(
    principal: Principal, proposal: Any, claims: dict[str, Any], now: datetime
) -> ToolOutcome:
    """A model cannot authorize: its permit or 'Granted' goes to the dispatcher as a claim,
    which refuses it; the proposal is then withdrawn so no human is asked about it."""
    try:
        operation = proposal_dispatch(principal=principal, proposal_id=proposal.id,
                                      permit_id=claims.get("permit"), now=now, enqueue=False)
    except Denial as denial:
        proposal_cancel(actor=principal, proposal_id=proposal.id, now=now)
        return ToolOutcome(status="denied", code=denial.code.value, message=denial.message,
                           proposal_id=proposal.id)
    # Only possible for a contract that needs no approval and was given no permit.
    return ToolOutcome(status=_SETTLED.get(operation.state, "unknown"),
                       proposal_id=proposal.id, operation_id=operation.id)


def nested_call(ctx: HandlerContext, operation: str, arguments: Any, *,
                now: datetime | None = None) -> ToolOutcome:
    """A call made from inside a native handler or adapter: through the dispatcher, under
    the authority of the principal and execution the outer operation runs for (spec §7)."""
    principal = Principal.objects.get(id=ctx.principal_id)
    when = now or timezone.now()
    try:
        proposal = proposal_create(principal=principal, operation=operation, arguments=arguments,
                                   execution_id=ctx.execution_id,
                                   call_id=f"{ctx.operation_id}/{next(ctx.nested_calls)}",
                                   now=when)
        found = Operation.objects.filter(proposal_id=proposal.id).first()
        if found is None:
            found = proposal_dispatch(principal=principal, proposal_id=proposal.id, now=when,
                                      enqueue=False)
        if found.state == "claimed":
            found = operation_execute(operation_id=found.id)
    except Denial as denial:
        return ToolOutcome(status="denied", code=denial.code.value, message=denial.message)
    return ToolOutcome(status=_SETTLED.get(found.state, "unknown"), result=found.result,
                       proposal_id=proposal.id, operation_id=found.id)


def _transcript(execution: Execution) -> list[dict[str, Any]]:
    return list(execution.entries.order_by("seq").values("seq", "kind", "call_id", "payload"))


def _pending_call(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    answered = {e["call_id"] for e in entries if e["kind"] == TranscriptEntry.Kind.TOOL_RESULT}
    for entry in entries:
        if entry["kind"] == TranscriptEntry.Kind.TOOL_CALL and entry["call_id"] not in answered:
            return entry
    return None


def _append(execution: Execution, kind: str, call_id: str, payload: dict[str, Any],
            now: datetime) -> None:
    with transaction.atomic():
        last = execution.entries.aggregate(m=Max("seq"))["m"] or 0
        TranscriptEntry.objects.create(execution=execution, seq=last + 1, kind=kind,
                                       call_id=call_id, payload=payload, at=now)
        Execution.objects.filter(id=execution.id).update(updated_at=now)


def _set_state(execution: Execution, state: str, now: datetime, final: str = "") -> None:
    Execution.objects.filter(id=execution.id).update(state=state, updated_at=now,
                                                     **({"final": final} if final else {}))


def _result(execution: Execution, state: Literal["waiting", "finished"],
            entries: list[dict[str, Any]]) -> RunResult:
    outcomes = [ToolOutcome(**e["payload"]) for e in entries
                if e["kind"] == TranscriptEntry.Kind.TOOL_RESULT]
    final = next((e["payload"]["text"] for e in entries
                  if e["kind"] == TranscriptEntry.Kind.FINAL), "")
    return RunResult(execution_id=execution.id, state=state, outcomes=outcomes, final=final)
