"""The exact-action steps: each an adapter from one IR step to the services
(docs/design.md#dispatcher, #outcomes).

Every step first replays its journal entry: a settled step returns its recorded result without
calling anything. Otherwise it calls the service that does the work and journals the outcome;
a refusal is the step's `denied` outcome. The store covers the gaps a crash can leave: `propose`
passes the step key as `call_id` (never two proposals), `dispatch` finds the operation already
claimed for the proposal (`proposal_drive`), `edit` journals its intent first and adopts the
revision it made.
"""

from __future__ import annotations

from typing import Literal

from dispatch.models import (
    ApprovalRequest,
    Attempt,
    Decision,
    Revision,
    TranscriptEntry,
    WorkflowWait,
)
from dispatch.runtime import get_runtime
from dispatch.services.executions import Running, proposal_drive
from dispatch.services.proposals import proposal_create
from dispatch.services.resources import resource_create, revision_create
from dispatch.workflows.context import RunContext
from dispatch.workflows.parallel import focus_prefix
from dispatch.workflows.values import (
    DecisionValue,
    Env,
    HandleValue,
    OutcomeValue,
    PermitValue,
    ProposalValue,
    StepOutcome,
    Wait,
    argument,
    data,
    trusted,
)
from protocols.approvals import effective_approval_state
from protocols.canonical import CanonicalizationError, digest, materialize_defaults
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject, JSONValue
from protocols.lifecycle import ApprovalState, Outcome
from protocols.workflow.ir import Create, Dispatch, Edit, Propose, Ref, RequestApproval


def create(ctx: RunContext, step: Create, env: Env, key: str) -> None:
    done = ctx.replay(key)
    if done is None:
        payload = ctx.guard(key, "create", lambda: data(env, step.payload))
        try:
            resource, revision = resource_create(principal=ctx.principal, kind=step.kind,
                                                 payload=payload, now=ctx.now)
        except Denial as denial:
            ctx.deny(key, "create", denial)
        done = ctx.settle(key, StepOutcome(key, "create", "created", detail={
            "resource_id": resource.id, "revision": revision.number, "kind": resource.kind}))
    if step.bind is not None:
        env[step.bind] = HandleValue(done["resource_id"], done["revision"], done["kind"])


def edit(ctx: RunContext, step: Edit, env: Env, key: str) -> None:
    done = ctx.replay(key)
    if done is None:
        handle = ctx.guard(key, "edit", lambda: trusted(env, step.handle, HandleValue))
        payload = ctx.guard(key, "edit", lambda: data(env, step.payload))
        revision = _adopt_edit(ctx, key, handle, payload)
        if revision is None:
            ctx.journal.put(key, {"resource_id": handle.id, "base": handle.revision},
                            ctx.now, kind=TranscriptEntry.Kind.TOOL_CALL)
            try:
                _, made = revision_create(principal=ctx.principal, resource_id=handle.id,
                                          base_revision=handle.revision, payload=payload,
                                          now=ctx.now)
            except Denial as denial:
                ctx.deny(key, "edit", denial)
            revision = made.number
        done = ctx.settle(key, StepOutcome(key, "edit", "edited", detail={
            "resource_id": handle.id, "revision": revision, "kind": handle.kind}))
    name = step.bind or (step.handle.name if isinstance(step.handle, Ref) else None)
    if name is not None:
        env[name] = HandleValue(done["resource_id"], done["revision"], done["kind"])


def _adopt_edit(ctx: RunContext, key: str, handle: HandleValue, payload: JSONValue) -> int | None:
    """After a crash between an edit and its journal entry, the revision the run made."""
    if key not in ctx.journal.calls:
        return None
    made = Revision.objects.filter(resource_id=handle.id, number=handle.revision + 1,
                                   created_by=ctx.principal).first()
    if made is None:
        return None
    try:
        full = materialize_defaults(get_runtime().resource_kinds[handle.kind].payload_schema,
                                    payload)
        same = digest(full) == made.digest
    except (CanonicalizationError, KeyError, TypeError, ValueError):
        same = False
    return made.number if same else None


def propose(ctx: RunContext, step: Propose, env: Env, key: str) -> None:
    done = ctx.replay(key)
    if done is None:
        arguments = ctx.guard(key, "propose", lambda: {
            name: argument(env, expr) for name, expr in step.args})
        try:
            # The step key is the call id: proposing this step again returns this proposal.
            # Intake holds it to the workflow's declared authority, as every action of the
            # run's tree (docs/design.md#run-trees): values the checker could not see (a
            # handle's sender, a JSON input) are checked there.
            proposal = proposal_create(
                principal=ctx.principal, operation=step.operation, arguments=arguments,
                execution_id=ctx.execution_id, call_id=key,
                approval_expires_in=ctx.expires.get(step.bind or ""), now=ctx.now)
        except Denial as denial:
            ctx.deny(key, "propose", denial)
        done = ctx.settle(key, StepOutcome(key, "propose", "proposed", detail={
            "proposal_id": proposal.id, "operation": proposal.operation,
            "digest": proposal.digest}))
    if step.bind is not None:
        env[step.bind] = ProposalValue(done["proposal_id"], done["operation"])


def request_approval(ctx: RunContext, step: RequestApproval, env: Env,
                     key: str) -> None:
    done = ctx.replay(key)
    if done is None:
        proposal = ctx.guard(key, "request_approval",
                             lambda: trusted(env, step.proposal, ProposalValue))
        # The approval request was opened with the proposal; its state is the decision.
        approval = ApprovalRequest.objects.filter(proposal_id=proposal.id).first()
        if approval is None:
            ctx.deny(key, "request_approval", Denial(
                DenialCode.PROTOCOL_STATE_INVALID,
                f"{proposal.operation} takes no approval: no approval request exists.",
                proposal_id=proposal.id), journal=False)
        detail = {"proposal_id": proposal.id, "approval_id": approval.id,
                  "approval_state": approval.state}
        state = effective_approval_state(approval.state, approval.expires_at, ctx.now)
        if state is ApprovalState.PENDING:
            ctx.record(key, "request_approval", "pending", detail=detail)
            raise Wait(key, kind="approval", approval_id=approval.id)
        if state is ApprovalState.GRANTED:
            outcome = StepOutcome(key, "request_approval", "granted", detail=detail)
        else:
            decision = Decision.objects.filter(approval_id=approval.id).first()
            reason = (decision.reason or "denied") if decision is not None else state.value
            outcome = StepOutcome(key, "request_approval", "rejected",
                                  detail={**detail, "reason": reason})
        done = ctx.settle(key, outcome)
    if step.bind is not None:
        tag: Literal["granted", "denied"] = (
            "granted" if done["_status"] == "granted" else "denied")
        env[step.bind] = DecisionValue(done["proposal_id"], tag, done.get("reason", ""))


def waits_for_slot(denial: Denial) -> bool:
    """A claim refused at the run's concurrency ceiling (a scope's, not the principal's): the
    dispatch waits for one of the run's actions to settle (docs/workflows.md#ceilings)."""
    limit = denial.details.get("limit")
    return (denial.code is DenialCode.BUDGET_EXHAUSTED
            and denial.details.get("budget") == "concurrency" and "scope_id" in denial.details
            and isinstance(limit, int) and limit > 0)  # a ceiling of 0 never frees a slot


def dispatch(ctx: RunContext, step: Dispatch, env: Env, key: str) -> None:
    done = ctx.replay(key)
    if done is None:
        proposal = ctx.guard(key, "dispatch",
                             lambda: trusted(env, step.proposal, ProposalValue))
        permit_expr = step.permit
        permit = None if permit_expr is None else ctx.guard(
            key, "dispatch", lambda: trusted(env, permit_expr, PermitValue))
        try:
            # The run waits for a human at `request_approval`; here the dispatcher decides.
            driven = proposal_drive(
                principal=ctx.principal, proposal_id=proposal.id,
                permit_id=permit.permit_id if permit else None, now=ctx.now,
                execute=ctx.mode == "inline", await_approval=False)
        except Denial as denial:
            if waits_for_slot(denial):
                # At the run's concurrency ceiling: the step waits for a slot instead of being
                # refused; the settling of one of the run's actions wakes it (not a poll).
                ctx.record(key, "dispatch", "waiting_for_slot", detail={
                    "proposal_id": proposal.id, "scope": denial.details.get("scope"),
                    "limit": denial.details.get("limit"),
                    "in_flight": denial.details.get("in_flight")})
                raise Wait(key, kind=WorkflowWait.Kind.SLOT, focus=focus_prefix(ctx)) from None
            ctx.deny(key, "dispatch", denial)
        operation = driven.operation
        detail: JSONObject = {"proposal_id": proposal.id, "operation_id": operation.id,
                                  "operation_state": operation.state}
        if isinstance(driven, Running):
            ctx.record(key, "dispatch", "running", detail=detail)
            raise Wait(key)
        if driven.outcome is Outcome.COMPLETED:
            detail["result"] = operation.result
        else:
            last = Attempt.objects.filter(operation_id=operation.id).order_by("-number").first()
            detail["error"] = operation.evidence or (last.error if last else "")
        done = ctx.settle(key, StepOutcome(key, "dispatch", driven.outcome.value,
                                           detail=detail))
    if step.bind is not None:
        env[step.bind] = OutcomeValue(done["_status"], done.get("result"),
                                      done.get("error", ""))
