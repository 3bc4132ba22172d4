"""The undelegated `agent` step: the embedded agent loop under the run's own principal
(docs/workflows.md#agent-steps-without-delegate).

The step opens an agent execution of the run's principal (the adapter's configuration recorded
with it, the step's `input` its first journal entry) and journals its id as the step's intent
before the model is asked anything. It runs the agent loop (`dispatch.agent`) there with the
step's tool set: the model is offered, and may call, only the tools both in the step's `tools`
and in the principal's tool set (and the resource tool for the kinds they take); a call to any
other is `tool_not_permitted`. Every call goes
through the dispatcher with its approvals, as any agent's. A call that waits for a human makes
the step (and the run) wait; running the execution again resumes the agent from its journal,
never asking the model again for an action it already proposed. The step settles with the
agent's final answer, and a settled step replays from the run's journal without the model.
A step with `delegate` is `delegated.py`'s.
"""

from __future__ import annotations

import copy

from dispatch.agent import execution_run
from dispatch.agent.loop import execution_open
from dispatch.models import Execution, TranscriptEntry
from dispatch.services.delegations import INPUT_CALL
from dispatch.services.executions import journal_append
from dispatch.workflows import delegated
from dispatch.workflows.context import RunContext
from dispatch.workflows.values import Env, StepOutcome, Wait, data
from protocols.denials import Denial
from protocols.jsontypes import JSONObject
from protocols.workflow.ir import AgentCall

#: The key in the step's intent entry naming its agent execution (`runtime.py` reads it to
#: refuse a resume under another adapter configuration).
AGENT_EXECUTION = "agent_execution_id"


def agent(ctx: RunContext, step: AgentCall, env: Env, key: str) -> None:
    if step.delegate is not None:
        delegated.agent(ctx, step, env, key)
        return
    done = ctx.replay(key)
    if done is None:
        done = _run(ctx, step, env, key)
    if step.bind is not None:
        env[step.bind] = copy.deepcopy(done["result"])


def _run(ctx: RunContext, step: AgentCall, env: Env, key: str) -> JSONObject:
    adapter = ctx.agents[step.agent]  # a missing adapter is refused before the run
    started = ctx.journal.calls.get(key)
    if started is None:
        inputs = ctx.guard(key, "agent", lambda: {name: data(env, expr)
                                                  for name, expr in step.inputs})
        try:
            opened = execution_open(principal=ctx.principal, adapter=adapter, now=ctx.now,
                                    parent=Execution.objects.get(id=ctx.execution_id))
        except Denial as denial:
            ctx.deny(key, "agent", denial)
        journal_append(execution_id=opened.id, kind=TranscriptEntry.Kind.INPUT,
                       call_id=INPUT_CALL, payload={"agent": step.agent, "input": inputs},
                       now=ctx.now)
        # First write wins: a concurrent run of this execution that got here first keeps its
        # agent execution, and this one is left unused (the model was never asked in it).
        started = ctx.journal.put(key, {"agent": step.agent, AGENT_EXECUTION: opened.id},
                                  ctx.now, kind=TranscriptEntry.Kind.TOOL_CALL)
    execution_id = str(started[AGENT_EXECUTION])
    detail: JSONObject = {"principal": ctx.principal.name, AGENT_EXECUTION: execution_id}
    result = execution_run(execution_id=execution_id, adapter=adapter, mode=ctx.mode,
                           clock=lambda: ctx.now, tools=frozenset(step.tools))
    if result.state == "waiting":
        ctx.record(key, "agent", "waiting", detail=detail)
        raise Wait(key)
    try:
        answer = delegated.returned(step.returns, result.final)
    except Denial as denial:
        ctx.deny(key, "agent", denial)
    calls = [{"status": o.status, "code": o.code, "operation_id": o.operation_id}
             for o in result.outcomes]
    return ctx.settle(key, StepOutcome(key, "agent", "completed", detail={
        **detail, "result": answer, "calls": calls}))
