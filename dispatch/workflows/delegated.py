"""The delegated `agent` step (docs/design.md#delegation; docs/workflows.md).

The step opens its delegation (`dispatch.services.delegations`): a sub-agent principal of its
own, a child grant only narrower than the workflow principal's, the budget carved out of the
run's. It runs the sub-agent loop (`dispatch.agent`) under that principal, renewing the step's
lease every turn, and ends the delegation when the step ends, however it ends: the sub-agent
finished, or anything raised. A sub-agent that waits for a human parks the step (the run
waits; the grant stays live within its expiry). A worker killed mid-step leaves a lapsed lease,
and reconciliation revokes the grant.

The record, not the journal, is what a replay finds first: a re-run of the step never opens a
second delegation. It takes the step over when nobody holds its lease (it was parked, or its
worker died and reconciliation has not come yet), waits while someone else does, and settles
from the record when the delegation has ended: with the sub-agent's answer if it finished,
else `authority_revoked`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence

from django.utils import timezone

from dispatch.agent import ToolOutcome, execution_run
from dispatch.agent.loop import adapter_fingerprint
from dispatch.ids import new_id
from dispatch.models import Delegation, TranscriptEntry
from dispatch.services.delegations import (
    FINISHED,
    RAISED,
    Bounds,
    SubAgent,
    delegation_acquire,
    delegation_end,
    delegation_for,
    delegation_open,
    delegation_park,
    delegation_renew,
)
from dispatch.services.executions import journal_read
from dispatch.workflows.context import RunContext
from dispatch.workflows.values import Env, StepOutcome, Wait, data
from protocols.denials import Denial, DenialCode
from protocols.grants import scope_as_json
from protocols.jsontypes import JSONObject, JSONValue
from protocols.workflow.ir import AgentCall


class LeaseLost(Exception):
    """The step's lease is no longer this run's (ended by reconciliation, or taken over)."""


def agent(ctx: RunContext, step: AgentCall, env: Env, key: str) -> None:
    done = ctx.replay(key)
    if done is None:
        done = _run(ctx, step, env, key)
    if step.bind is not None:
        env[step.bind] = copy.deepcopy(done["result"])


def _run(ctx: RunContext, step: AgentCall, env: Env, key: str) -> JSONObject:
    delegate = step.delegate
    assert delegate is not None  # an agent step without one is refused before the run
    adapter = ctx.agents[step.agent]  # a missing adapter is refused before the run
    holder = new_id("lse")
    # One clock for the delegation, the wall clock: the grant is issued when the step starts
    # (not at the run's `ctx.now`, which may be long past), the sub-agent's checks and the
    # step's end use it, and reconciliation compares the grant's expiry and the lease with it.
    clock = timezone.now
    found = delegation_for(execution_id=ctx.execution_id, step=key)
    if found is None:
        inputs = ctx.guard(key, "agent", lambda: {name: data(env, expr)
                                                  for name, expr in step.inputs})
        bounds = Bounds(list(delegate.operations), scope_as_json(delegate.scope),
                        delegate.expires_in, delegate.budget)
        sub = SubAgent(step.agent, list(step.tools), adapter.name, adapter.config(),
                       adapter_fingerprint(adapter), inputs)
        try:
            found = delegation_open(principal=ctx.principal, execution_id=ctx.execution_id,
                                    step=key, bounds=bounds, sub=sub, holder=holder,
                                    now=clock())
        except Denial as denial:
            # A refusal is the step's only if no concurrent run of this execution opened it.
            found = delegation_for(execution_id=ctx.execution_id, step=key)
            if found is None:
                ctx.deny(key, "agent", denial)
    if found.holder != holder and found.ended_at is None and not delegation_acquire(
            delegation_id=found.id, holder=holder):
        return _not_ours(ctx, step, key, found.id)
    if found.ended_at is not None:
        return _settle_ended(ctx, step, key, found)
    delegation_id = found.id

    def heartbeat() -> None:
        if not delegation_renew(delegation_id=delegation_id, holder=holder):
            raise LeaseLost(delegation_id)

    try:
        result = execution_run(execution_id=found.agent_execution_id, adapter=adapter,
                               mode=ctx.mode, clock=clock, heartbeat=heartbeat)
    except LeaseLost:
        return _not_ours(ctx, step, key, delegation_id)
    except BaseException:
        # However the step ends, its grant ends with it (docs/design.md#delegation); then the error
        # goes on.
        delegation_end(delegation=found, reason=RAISED, actor=ctx.principal.name,
                       now=clock(), holder=holder)
        raise
    if result.state == "waiting":
        delegation_park(delegation_id=delegation_id, holder=holder)
        ctx.record(key, "agent", "waiting", detail=_detail(found))
        raise Wait(key)
    # Ended before it is journaled: a crash in between is settled from the record on replay.
    delegation_end(delegation=found, reason=FINISHED, actor=ctx.principal.name,
                   now=clock(), holder=holder)
    return _settle_finished(ctx, step, key, found, result.final, result.outcomes)


def _not_ours(ctx: RunContext, step: AgentCall, key: str,
              delegation_id: str) -> JSONObject:
    """Someone else holds the step's lease (the run waits), or it ended meanwhile."""
    found = delegation_for(execution_id=ctx.execution_id, step=key)
    assert found is not None and found.id == delegation_id  # a record is never deleted
    if found.ended_at is None:
        ctx.record(key, "agent", "running", detail=_detail(found))
        raise Wait(key)
    return _settle_ended(ctx, step, key, found)


def _settle_ended(ctx: RunContext, step: AgentCall, key: str,
                  found: Delegation) -> JSONObject:
    """The delegation ended without this run settling the step: with the sub-agent's answer
    if it finished first, else the step's grant was revoked under it."""
    entries = journal_read(execution_id=found.agent_execution_id)
    if entries and entries[-1]["kind"] == TranscriptEntry.Kind.FINAL:
        final = str(entries[-1]["payload"].get("text", ""))
        outcomes = [ToolOutcome(**e["payload"]) for e in entries
                    if e["kind"] == TranscriptEntry.Kind.TOOL_RESULT]
        return _settle_finished(ctx, step, key, found, final, outcomes)
    ctx.deny(key, "agent", Denial(
        DenialCode.AUTHORITY_REVOKED,
        f"The step's delegated grant was revoked ({found.end_reason}) before its sub-agent "
        "finished; a new execution runs the step under a new grant.",
        delegation_id=found.id, grant_id=found.grant_id, reason=found.end_reason))


def _settle_finished(ctx: RunContext, step: AgentCall, key: str, found: Delegation,
                     final: str, outcomes: Sequence[ToolOutcome]) -> JSONObject:
    try:
        result = returned(step.returns, final)
    except Denial as denial:
        ctx.deny(key, "agent", denial)
    calls = [{"status": o.status, "code": o.code, "operation_id": o.operation_id}
             for o in outcomes]
    return ctx.settle(key, StepOutcome(key, "agent", "completed", detail={
        **_detail(found), "result": result, "calls": calls}))


def returned(returns: str, text: str) -> JSONValue:
    """The sub-agent's final answer as the step's data: its text read as JSON where it is
    JSON (NaN and infinities are not), else the text itself; `returns: bool` takes only
    `true` or `false`."""

    def refuse(constant: str) -> JSONValue:
        raise ValueError(constant)

    try:
        value: JSONValue = json.loads(text, parse_constant=refuse)
    except ValueError:
        value = text
    if returns == "bool" and not isinstance(value, bool):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/result", "message": "the sub-agent's answer must be true or false"}])
    return value


def _detail(found: Delegation) -> JSONObject:
    return {"delegation_id": found.id, "grant_id": found.grant_id,
            "principal": found.principal.name, "agent_execution_id": found.agent_execution_id}
