"""The interpreter: control flow over the IR (if, match, loop, try) and the run's end state.

Steps run in order; each step's key is its path and its iteration in every enclosing loop
(`journal.step_key`). The exact-action steps are `steps.py`'s. A step that waits (`Wait`) makes
the run return `waiting`; a refusal (`Denied`) ends it `denied` unless a `try` catches it; a
finished or denied run is journaled whole, so running it again answers from the journal.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from dispatch.models import Execution, Permit, TranscriptEntry
from dispatch.services.executions import execution_move
from dispatch.workflows import deadlines, embedded, parallel, steps, waits
from dispatch.workflows.context import RunContext
from dispatch.workflows.journal import HEADER, run_from, step_key
from dispatch.workflows.shape import walk
from dispatch.workflows.values import (
    TRUSTED,
    DecisionValue,
    Denied,
    Env,
    HandleValue,
    OutcomeValue,
    PermitValue,
    RunState,
    Wait,
    WorkflowRefused,
    WorkflowRun,
    value,
)
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject
from protocols.lifecycle import Outcome
from protocols.lifecycle_runs import ExecutionEvent
from protocols.workflow.ir import (
    AgentCall,
    Approve,
    Arm,
    Block,
    Create,
    Dispatch,
    Edit,
    If,
    Let,
    Loop,
    Match,
    Parallel,
    Propose,
    Race,
    Receive,
    Ref,
    RequestApproval,
    Step,
    Try,
)

_Adapter = Callable[[RunContext, Any, JSONObject, str], None]
_STEPS: dict[type, _Adapter] = {
    Create: steps.create, Edit: steps.edit, Propose: steps.propose,
    RequestApproval: steps.request_approval, Dispatch: steps.dispatch,
    AgentCall: embedded.agent, Receive: waits.receive, Approve: waits.approve,
}


class Interpreter:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        ctx.expires = approval_windows(ctx.workflow.steps)

    def run(self, pinned: dict[str, JSONObject]) -> WorkflowRun:
        ctx = self.ctx
        env: Env = {}
        for name, pin in pinned.items():
            handle = pin.get("handle")
            env[name] = HandleValue(**handle) if handle else copy.deepcopy(pin["data"])
        state: RunState = "finished"
        waiting: Wait | None = None
        denial = None
        try:
            self.block(ctx.workflow.steps, env, ())
            deadlines.step_boundary(ctx)  # a run that ended during its last step has ended
        except Wait as wait:
            state, waiting = "waiting", wait
        except Denied as denied:
            state, denial = "denied", denied.outcome
        except deadlines.RunEnded as ended:
            return deadlines.ended_run(ctx, ended)
        run = WorkflowRun(ctx.execution_id, ctx.workflow.name, state, tuple(ctx.outcomes),
                          waiting_on=waiting.path if waiting else None, denial=denial)
        if waiting is not None:
            waits.park(ctx, waiting)
            return run
        final = {"state": state, "outcomes": [asdict(o) for o in ctx.outcomes],
                 "denial": asdict(denial) if denial else None}
        recorded = ctx.journal.put(HEADER, final, ctx.now, kind=TranscriptEntry.Kind.FINAL)
        text = "finished" if state == "finished" else f"denied: {denial.code if denial else ''}"
        execution_move(Execution.objects.get(id=ctx.execution_id), ExecutionEvent.FINISH,
                       now=ctx.now, actor=ctx.principal.name, final=text)
        return run_from(recorded, ctx.execution_id, ctx.workflow.name)

    # -- blocks and control flow

    def block(self, block: Block, env: Env, loops: tuple[int, ...]) -> None:
        for step in block:
            self.step(step, env, loops)

    def step(self, step: Step, env: Env, loops: tuple[int, ...]) -> None:
        deadlines.step_boundary(self.ctx)
        key = step_key(step.span.path, loops)
        adapter = _STEPS.get(type(step))
        if adapter is not None:
            adapter(self.ctx, step, env, key)
        elif isinstance(step, Let):
            env[step.bind] = self.ctx.guard(key, "let", lambda: value(env, step.value))
        elif isinstance(step, If):
            self.if_(step, env, key, loops)
        elif isinstance(step, Match):
            self.match(step, env, key, loops)
        elif isinstance(step, Parallel | Race) or (isinstance(step, Loop) and step.parallel):
            parallel.run_concurrent(self, step, env, key, loops)
        elif isinstance(step, Loop):
            self.loop(step, env, key, loops)
        elif isinstance(step, Try):
            self.try_(step, env, key, loops)
        else:  # every step kind the checker admits has a branch above: a new one needs its own
            raise WorkflowRefused(DenialCode.UNSUPPORTED_STEP,
                                  f"step kind {type(step).__name__} is not supported by the "
                                  "runtime yet", path=step.span.path)

    def if_(self, step: If, env: Env, key: str, loops: tuple[int, ...]) -> None:
        condition = self.ctx.guard(key, "if", lambda: value(env, step.condition))
        if not isinstance(condition, bool):
            self.ctx.deny(key, "if", Denial(DenialCode.SCHEMA_INVALID, errors=[{
                "pointer": f"/{step.condition}", "message": "an `if` condition must be a bool"}]),
                journal=False)
        self.ctx.record(key, "if", "then" if condition else "else")
        self.block(step.then if condition else step.orelse, env, loops)

    def match(self, step: Match, env: Env, key: str, loops: tuple[int, ...]) -> None:
        subject = self.ctx.guard(key, "match", lambda: value(env, step.subject))
        fields: JSONObject
        tag: str
        if isinstance(subject, DecisionValue):
            tag = subject.tag
            if tag == "granted":
                permit = Permit.objects.filter(proposal_id=subject.proposal_id).first()
                fields = {"permit": PermitValue(subject.proposal_id, permit.id if permit else "")}
            else:
                fields = {"reason": subject.reason}
        elif isinstance(subject, OutcomeValue):
            tag = subject.tag
            fields = ({"result": subject.result} if tag == Outcome.COMPLETED
                      else {"error": subject.error})
        elif isinstance(subject, TRUSTED):
            self.ctx.deny(key, "match", Denial(DenialCode.SCHEMA_INVALID, errors=[{
                "pointer": f"/{step.subject}", "message": "cannot match on this value"}]),
                journal=False)
        else:
            # JSON data: a string is its own tag, an object carries it in `tag`.
            raw = subject.get("tag") if isinstance(subject, dict) else subject
            tag = raw.lower() if isinstance(raw, str) else "_"
            fields = subject if isinstance(subject, dict) else {}
        arm = _arm(step.arms, tag)
        self.ctx.record(key, "match", tag if arm is None or arm.tag != "_" else f"_ ({tag})")
        if arm is None:
            return
        for field_name, name in arm.bindings:
            if field_name not in fields:
                self.ctx.deny(key, "match", Denial(DenialCode.SCHEMA_INVALID, errors=[{
                    "pointer": f"/{step.subject}/{field_name}",
                    "message": f"the `{tag}` value has no field `{field_name}`"}]), journal=False)
            bound = fields[field_name]
            env[name] = bound if isinstance(bound, TRUSTED) else copy.deepcopy(bound)
        self.block(arm.body, env, loops)

    def loop(self, step: Loop, env: Env, key: str, loops: tuple[int, ...]) -> None:
        items = parallel.loop_items(self.ctx, step, env, key)
        for number, item in enumerate(items, start=1):
            body = dict(env)
            if step.over is not None:
                body[step.item or "item"] = copy.deepcopy(item)
            self.block(step.body, body, (*loops, number))
            for name in env:  # the body may rebind outer names (the checker keeps them equal)
                env[name] = body[name]

    def try_(self, step: Try, env: Env, key: str, loops: tuple[int, ...]) -> None:
        body = dict(env)
        try:
            self.block(step.body, body, loops)
        except Denied as denied:
            self.ctx.record(key, "try", "caught", code=denied.outcome.code,
                            message=denied.outcome.message, detail={"at": denied.outcome.path})
            catch = dict(env)
            if step.catch is not None:
                self.block(step.catch, catch, loops)
            if step.bind is not None and step.fallback is not None:
                catch[step.bind] = value(catch, step.fallback)
            env.update(catch)
            return
        if step.bind is not None and step.result is not None:
            body[step.bind] = value(body, step.result)
        env.update(body)


def _arm(arms: tuple[Arm, ...], tag: str) -> Arm | None:
    return next((a for a in arms if a.tag == tag), None) or next(
        (a for a in arms if a.tag == "_"), None)


def approval_windows(block: Block) -> dict[str, int]:
    """`expires:` of each `request_approval`, by the proposal's binding: the approval request
    is opened with the proposal, so its window is set when proposing (never lengthened)."""
    windows: dict[str, int] = {}
    for step in walk(block):
        if isinstance(step, RequestApproval) and step.expires is not None \
                and isinstance(step.proposal, Ref) and not step.proposal.fields:
            name = step.proposal.name
            windows[name] = min(step.expires, windows.get(name, step.expires))
    return windows
