"""The agent loop: every tool call passes the dispatcher; the transcript is persisted before
the loop continues; a restarted loop resumes pending calls from the transcript and never asks
the model again for an action it already proposed (docs/design.md#outcomes)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Literal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dispatch.agent.adapters import FinalAnswer, ModelAdapter, ToolCall, ToolSpec
from dispatch.failpoints import failpoint
from dispatch.handlers import HandlerContext
from dispatch.models import Execution, Principal, Proposal, Resource, TranscriptEntry
from dispatch.runtime import get_runtime
from dispatch.services.access import resource_kinds_of
from dispatch.services.budgets import budget_adjust, budget_take
from dispatch.services.cancellation import proposal_cancel
from dispatch.services.executions import (
    JournalEntry,
    Settled,
    execution_create,
    execution_move,
    journal_append,
    journal_read,
    proposal_drive,
)
from dispatch.services.proposals import proposal_create
from dispatch.services.resources import resource_create
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject, JSONValue
from protocols.lifecycle import RESOURCE_PROTOCOLS, Outcome, ResourceEvent, sources
from protocols.lifecycle_runs import ExecutionEvent
from protocols.usage import Usage

RESOURCE_TOOL = "resources.create"
Status = Literal["completed", "no_effect", "unknown", "denied"]
#: The agent's word for each outcome. `ToolOutcome.status` is documented (docs/agent-runtime.md),
#: persisted in transcripts and read back by the model on resume, so it keeps `no_effect` where
#: the operation lifecycle says `failed_no_effect`: this is the one place that maps them.
_STATUS: dict[Outcome, Status] = {
    Outcome.COMPLETED: "completed",
    Outcome.FAILED_NO_EFFECT: "no_effect",
    Outcome.UNKNOWN: "unknown",
}


@dataclass(frozen=True)
class ToolOutcome:
    """A typed outcome of one tool call, as the model receives it back."""

    status: Status
    code: str | None = None
    message: str = ""
    result: JSONValue = None
    proposal_id: str | None = None
    operation_id: str | None = None


@dataclass(frozen=True)
class RunResult:
    execution_id: str
    state: Literal["waiting", "finished"]
    outcomes: list[ToolOutcome] = field(default_factory=list)
    final: str = ""


class ResumeRefusedError(RuntimeError):
    """The execution was started under another adapter configuration: resuming it would
    regenerate actions instead of replaying them (docs/design.md#outcomes). Start a new
    execution."""


def adapter_fingerprint(adapter: ModelAdapter) -> str:
    """The digest of the adapter's name and configuration (its script, model and settings).
    Sorted-key JSON, not the snapshot canonicalization: a configuration may hold keys such as
    a script's `$result`, which canonical JSON reserves."""
    encoded = json.dumps({"adapter": adapter.name, "config": adapter.config()},
                         sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(encoded.encode()).hexdigest()


def execution_open(*, principal: Principal, adapter: ModelAdapter, now: datetime,
                   parent: Execution | None = None) -> Execution:
    """A new execution, with the adapter's configuration persisted for an exact resume;
    `parent`: the run whose agent step opens it, whose tree it joins (docs/design.md#run-trees)."""
    return execution_create(principal=principal, adapter=adapter.name, now=now,
                            adapter_config=adapter.config(),
                            adapter_fingerprint=adapter_fingerprint(adapter), parent=parent)


def _refuse_another_adapter(execution: Execution, adapter: ModelAdapter) -> None:
    if not execution.adapter_fingerprint:
        return  # started before configurations were recorded: nothing to compare
    if adapter_fingerprint(adapter) != execution.adapter_fingerprint:
        raise ResumeRefusedError(
            f"execution {execution.id} was started with another {execution.adapter} "
            "configuration (script or model settings); resuming would regenerate its actions. "
            "Resume it with the configuration it was started with, or start a new execution")


def advertised_tools(principal: Principal,
                     within: Collection[str] | None = None) -> list[ToolSpec]:
    """The agent's tool set (narrowed to `within`, if given), less tools no resource of its can
    currently be used with; the resource tool only for the kinds its tools take."""
    runtime = get_runtime()
    names = set(principal.tools) if within is None else set(principal.tools) & set(within)
    kinds = sorted(resource_kinds_of(principal) if within is None else _kinds_taken(names))
    tools = [ToolSpec(RESOURCE_TOOL, f"Create a resource ({', '.join(kinds)}) to act on later.",
                      {"type": "object", "required": ["kind", "payload"],
                       "properties": {"kind": {"enum": kinds}}})] if kinds else []
    for name in sorted(names):
        try:
            contract = runtime.contract(name)
        except Denial:
            continue
        # A resource the operation only reads need not allow a proposal (an attested report).
        usable = all(_any_resource_allows(principal, kind, ResourceEvent.PROPOSE)
                     for name, kind in contract.protocol_preconditions.items()
                     if name not in contract.reads)
        if usable:
            tools.append(ToolSpec(name, f"{name} v{contract.contract_version}",
                                  contract.input_type))
    return tools


def _kinds_taken(names: Collection[str]) -> frozenset[str]:
    """The resource kinds the operations `names` take (as `resource_kinds_of` for a tool set)."""
    return frozenset(kind for contract in get_runtime().registry
                     if contract.qualified_name in names
                     for kind in contract.protocol_preconditions.values())


def _refuse_outside(principal: Principal, call: JSONObject, within: Collection[str]) -> None:
    """A call outside the narrowed tool set: an operation not in it, or a resource of a kind
    none of its operations (that the principal holds) takes."""
    name = call["name"]
    if name == RESOURCE_TOOL:
        arguments = call["arguments"]
        kind = arguments.get("kind") if isinstance(arguments, dict) else None
        if kind in _kinds_taken(set(principal.tools) & set(within)):
            return
        raise Denial(DenialCode.TOOL_NOT_PERMITTED, operation=RESOURCE_TOOL, kind=str(kind))
    if name not in within:
        raise Denial(DenialCode.TOOL_NOT_PERMITTED, operation=name)


def _any_resource_allows(principal: Principal, kind: str, event: ResourceEvent) -> bool:
    protocol = RESOURCE_PROTOCOLS[kind]
    states = sorted(str(state) for state in sources(protocol, event))
    return Resource.objects.filter(tenant_id=principal.tenant_id, kind=kind,
                                   created_by=principal, state__in=states).exists()


def execution_run(
    *, execution_id: str, adapter: ModelAdapter, mode: Literal["inline", "worker"] = "inline",
    max_turns: int = 100, clock: Callable[[], datetime] = timezone.now,
    heartbeat: Callable[[], None] | None = None, tools: Collection[str] | None = None,
) -> RunResult:
    """Run until the model finishes or a call waits for a human or a worker; resumable.

    `heartbeat`, if given, is called before every turn (a delegated workflow step renews its
    lease there, and raises to stop a run whose step it no longer holds). `tools`, if given,
    narrows the principal's tool set (a workflow's undelegated `agent` step passes its own):
    only the tools in both are advertised, the resource tool only for the kinds they take, and
    a call to any other is `tool_not_permitted`."""
    execution = Execution.objects.select_related("principal").get(id=execution_id)
    _refuse_another_adapter(execution, adapter)
    principal = execution.principal
    for _ in range(max_turns):
        if heartbeat is not None:
            heartbeat()
        entries = journal_read(execution_id=execution.id)
        if entries and entries[-1]["kind"] == TranscriptEntry.Kind.FINAL:
            return _result(execution, "finished", entries)
        pending = _pending_call(entries)
        if pending is not None:
            outcome = _advance(execution, principal, pending, mode, clock(), tools)
            if outcome is None:
                execution_move(execution, ExecutionEvent.WAIT, now=clock(),
                               actor=principal.name)
                return _result(execution, "waiting", entries)
            journal_append(execution_id=execution.id, kind=TranscriptEntry.Kind.TOOL_RESULT,
                           call_id=pending["call_id"], payload=asdict(outcome), now=clock())
            continue
        # Only now, with nothing pending, is the model asked for its next action: within
        # the execution's token budget, where the adapter can promise a per-call maximum.
        reserved = _reserve_model_tokens(execution.id, adapter)
        if reserved is None:
            _finish(execution, "stopped: this execution's model token budget is used up",
                    clock(), stopped=DenialCode.BUDGET_EXHAUSTED.value)
            continue
        action = adapter.next_action(entries, advertised_tools(principal, tools))
        _return_unused_tokens(execution.id, reserved, action.usage)
        if isinstance(action, FinalAnswer):
            _finish(execution, action.text, clock(), usage=action.usage)
            continue
        call_id = f"call-{len([e for e in entries if e['kind'] == 'tool_call']) + 1}"
        journal_append(execution_id=execution.id, kind=TranscriptEntry.Kind.TOOL_CALL,
                       call_id=call_id, payload=_call_payload(action), now=clock())
    raise RuntimeError(f"execution {execution_id} exceeded {max_turns} turns")


def _call_payload(action: ToolCall) -> JSONObject:
    return {"name": action.name, "arguments": action.arguments, "label": action.label,
            "claims": dict(action.claims), "usage": _usage_json(action.usage)}


def _finish(execution: Execution, text: str, now: datetime, *, usage: Usage | None = None,
            stopped: str = "") -> None:
    payload: JSONObject = {"text": text, "usage": _usage_json(usage)}
    if stopped:
        payload["stopped"] = stopped
    journal_append(execution_id=execution.id, kind=TranscriptEntry.Kind.FINAL, call_id="",
                   payload=payload, now=now)
    execution_move(execution, ExecutionEvent.FINISH, now=now, actor=execution.principal.name,
                   final=text)


def _usage_json(usage: Usage | None) -> JSONObject | None:
    return None if usage is None else asdict(usage)


# --- model usage: accounting always, a hard limit only by reservation (docs/design.md#budgets) ----


def model_tokens_key(execution_id: str) -> str:
    return f"model_tokens:{execution_id}"


def _reserve_model_tokens(execution_id: str, adapter: ModelAdapter) -> int | None:
    """Reserve the adapter's per-call maximum before the call; None when the budget cannot
    hold it (the model is not asked). 0: nothing reserved, because no limit is set or the
    adapter promises no maximum (then usage is accounted, never limited)."""
    limit = settings.BUDGET_MODEL_TOKENS_PER_EXECUTION
    if not limit:
        return 0
    # An adapter written before usage accounting has no such attribute: it promises nothing.
    maximum = getattr(adapter, "max_tokens_per_call", None)
    if maximum is None:
        return 0
    try:
        with transaction.atomic():
            budget_take(limits=[(model_tokens_key(execution_id), limit)], cost=maximum)
    except Denial:
        return None
    return int(maximum)


def _return_unused_tokens(execution_id: str, reserved: int, usage: Usage | None) -> None:
    """Settle the reservation with what the call used: give back the rest, or, when it used
    more than it promised, charge the excess up to the limit, so the next call is refused. A
    call that reported nothing, or a crash before this, keeps the whole reservation: the
    budget is over-counted, never under."""
    if not reserved or usage is None:
        return
    budget_adjust(key=model_tokens_key(execution_id), delta=usage.tokens - reserved)


def _advance(
    execution: Execution, principal: Principal, call: JournalEntry,
    mode: Literal["inline", "worker"], now: datetime, tools: Collection[str] | None = None,
) -> ToolOutcome | None:
    """Take a persisted call one step further; None while it waits for a human or worker."""
    payload = call["payload"]
    try:
        if tools is not None:
            _refuse_outside(principal, payload, tools)
        if payload["name"] == RESOURCE_TOOL:
            return _create_resource(principal, payload["arguments"], now)
        proposal = proposal_create(principal=principal, operation=payload["name"],
                                   arguments=payload["arguments"], execution_id=execution.id,
                                   call_id=call["call_id"], now=now)
        failpoint("agent.after_proposal")
        if payload["claims"]:
            return _refuse_model_claims(principal, proposal, payload["claims"], mode, now)
        driven = proposal_drive(principal=principal, proposal_id=proposal.id, now=now,
                                execute=mode == "inline")
        return _settled(driven) if isinstance(driven, Settled) else None
    except Denial as denial:
        return ToolOutcome(status="denied", code=denial.code.value, message=denial.message)


def _create_resource(principal: Principal, arguments: JSONValue, now: datetime) -> ToolOutcome:
    if not isinstance(arguments, dict):
        arguments = {}
    resource, revision = resource_create(principal=principal, kind=arguments.get("kind"),
                                         payload=arguments.get("payload"), now=now)
    return ToolOutcome(status="completed", result={"id": resource.id, "revision": revision.number})


def _refuse_model_claims(
    principal: Principal, proposal: Proposal, claims: JSONObject,
    mode: Literal["inline", "worker"], now: datetime,
) -> ToolOutcome | None:
    """A model cannot authorize: its permit or 'Granted' goes to the dispatcher as a claim,
    which refuses it; the proposal is then withdrawn so no human is asked about it."""
    try:
        driven = proposal_drive(principal=principal, proposal_id=proposal.id,
                                permit_id=claims.get("permit"), now=now,
                                execute=mode == "inline", await_approval=False)
    except Denial as denial:
        proposal_cancel(actor=principal, proposal_id=proposal.id, now=now)
        return ToolOutcome(status="denied", code=denial.code.value, message=denial.message,
                           proposal_id=proposal.id)
    # Reached only by a contract that needs no approval, given no permit: it runs as any call.
    return _settled(driven) if isinstance(driven, Settled) else None


def _settled(driven: Settled) -> ToolOutcome:
    operation = driven.operation
    return ToolOutcome(status=_STATUS[driven.outcome], result=operation.result,
                       proposal_id=operation.proposal_id, operation_id=operation.id,
                       message=operation.evidence)


def nested_call(ctx: HandlerContext, operation: str, arguments: JSONValue, *,
                now: datetime | None = None) -> ToolOutcome:
    """A call made from inside a native handler or adapter: through the dispatcher, under
    the authority of the principal and execution the outer operation runs for
    (docs/design.md#dispatcher)."""
    principal = Principal.objects.get(id=ctx.principal_id)
    when = now or timezone.now()
    try:
        proposal = proposal_create(principal=principal, operation=operation, arguments=arguments,
                                   execution_id=ctx.execution_id,
                                   call_id=f"{ctx.operation_id}/{next(ctx.nested_calls)}",
                                   now=when)
        # A handler cannot wait for a human: a pending approval is the dispatcher's refusal.
        driven = proposal_drive(principal=principal, proposal_id=proposal.id, now=when,
                                execute=True, await_approval=False)
    except Denial as denial:
        return ToolOutcome(status="denied", code=denial.code.value, message=denial.message)
    if isinstance(driven, Settled):
        return _settled(driven)
    # Claimed, yet its attempt is another process's: this call cannot know what it did.
    return ToolOutcome(status=_STATUS[Outcome.UNKNOWN], result=driven.operation.result,
                       proposal_id=proposal.id, operation_id=driven.operation.id)


def _pending_call(entries: list[JournalEntry]) -> JournalEntry | None:
    answered = {e["call_id"] for e in entries if e["kind"] == TranscriptEntry.Kind.TOOL_RESULT}
    for entry in entries:
        if entry["kind"] == TranscriptEntry.Kind.TOOL_CALL and entry["call_id"] not in answered:
            return entry
    return None


def _result(execution: Execution, state: Literal["waiting", "finished"],
            entries: list[JournalEntry]) -> RunResult:
    outcomes = [ToolOutcome(**e["payload"]) for e in entries
                if e["kind"] == TranscriptEntry.Kind.TOOL_RESULT]
    final = next((e["payload"]["text"] for e in entries
                  if e["kind"] == TranscriptEntry.Kind.FINAL), "")
    return RunResult(execution_id=execution.id, state=state, outcomes=outcomes, final=final)
