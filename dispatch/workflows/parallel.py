"""Concurrent steps (`parallel`, a parallel `loop`, `race`) on the store's own fan-out
(docs/design.md#budgets; docs/workflows.md#concurrent-steps).

A concurrent step has *lanes*: a branch of a `parallel` or `race`, an iteration of a parallel
loop. Reaching the step, the run first checks that no two lanes name one handle, proposal,
decision or permit (`ownership.refuse_shared`: `parallel_capture`, before anything is proposed
or claimed). Then:

- **Fan-out.** The step's intent (its lanes) is journaled, one Celery task per lane not ended
  is enqueued (`dispatch.tasks.workflow_branch`, by name: ids only), and the run parks at the
  step (a `WorkflowWait` of kind `join`): no thread waits for the branches.
- **A lane** runs on a worker as the same execution *focused* on it: the run replays its
  journal up to the step, runs that lane's steps only (each journaled under its own step key,
  so lanes never share an entry), journals the lane's end (`completed`, `denied`, or
  `cancelled` for a race's loser) and stops (`LaneDone`). A lane that waits for an approval
  parks at that step like any run; its decision resumes the execution, which fans the lane out
  again.
- **The join** is durable: the lane that ends last marks the `join` wait delivered and wakes it
  (after its commit), and the park itself looks again after its own commit, so a lane ending
  while the run parks is not missed; `branches.sweep` (beat) delivers a join whose lanes all
  ended and enqueues again a lane whose worker died. The resumed run replays every lane from the
  journal (no service is called again), in order, and goes on: a lane's refusal is the step's
  refusal (a `try` catches it). Resuming twice resumes once (the wait's claim).

An execution started without its source (a Python-built workflow) cannot be rebuilt on a
worker, and a lane holding an `agent` step needs the model adapter its caller holds: then the
caller runs the lanes one after the other, each focused in turn, in its own process.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from celery import current_app
from django.db import transaction

from dispatch.failpoints import failpoint
from dispatch.models import Execution, TranscriptEntry, WorkflowWait
from dispatch.services.wakeups import wake_on_input
from dispatch.workflows import ownership, race
from dispatch.workflows.context import RunContext
from dispatch.workflows.journal import Journal, step_key
from dispatch.workflows.shape import walk
from dispatch.workflows.values import Denied, Env, Wait, value
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject
from protocols.workflow.ir import AgentCall, Block, Loop, Parallel, Race, Step

BRANCH_TASK = "dispatch.tasks.workflow_branch"
Concurrent = Parallel | Race | Loop


class LaneDone(Exception):
    """The focused lane has ended (its end is journaled): the worker's run stops here."""


class _Interp(Protocol):
    ctx: RunContext

    def step(self, step: Step, env: Env, loops: tuple[int, ...]) -> None: ...

    def block(self, block: Block, env: Env, loops: tuple[int, ...]) -> None: ...


@dataclass
class Lane:
    label: str
    body: Block
    env: Env
    loops: tuple[int, ...]


def lane_key(key: str, label: str) -> str:
    return step_key(f"{key}/{label}", ())


def construct(step: Concurrent) -> str:
    return "race" if isinstance(step, Race) else "parallel" if isinstance(step, Parallel) \
        else "loop"


def lanes_of(interp: _Interp, step: Concurrent, env: Env, key: str,
             loops: tuple[int, ...]) -> list[Lane]:
    if not isinstance(step, Loop):
        return [Lane(b.name, b.body, dict(env), loops) for b in step.branches]
    lanes = []
    for number, item in enumerate(loop_items(interp.ctx, step, env, key), start=1):
        body = dict(env)
        if step.over is not None:
            body[step.item or "item"] = copy.deepcopy(item)
        lanes.append(Lane(str(number), step.body, body, (*loops, number)))
    return lanes


def loop_items(ctx: RunContext, step: Loop, env: Env, key: str) -> list[Any]:
    """A loop's items: the JSON list `over` names, or `times` nothing."""
    if step.over is None:
        return [None] * (step.times or 0)
    over_expr = step.over
    over = ctx.guard(key, "loop", lambda: value(env, over_expr))
    if not isinstance(over, list):
        ctx.deny(key, "loop", Denial(DenialCode.SCHEMA_INVALID, errors=[{
            "pointer": f"/{step.over}", "message": "a loop runs over a JSON list"}]),
            journal=False)
    return over


def run_concurrent(interp: _Interp, step: Concurrent, env: Env, key: str,
                   loops: tuple[int, ...]) -> None:
    """The interpreter's step for `parallel`, `race` and a parallel loop."""
    ctx = interp.ctx
    lanes = lanes_of(interp, step, env, key, loops)
    what = construct(step)
    ctx.guard(key, what, lambda: ownership.refuse_shared(
        env, ((lane.label, lane.body) for lane in lanes), each_iteration=what == "loop",
        construct=what))
    focus = ctx.focus[ctx.entered] if ctx.entered < len(ctx.focus) else None
    if focus is not None and focus[0] == key:
        ctx.entered += 1
        lane = next((lane for lane in lanes if lane.label == focus[1]), None)
        if lane is not None:
            run_lane(interp, step, lane, key)
        raise LaneDone(key)
    _fresh(ctx)
    if not _joinable(ctx, step, key, lanes):
        pending = [lane.label for lane in lanes if lane_key(key, lane.label) not in
                   ctx.journal.results]
        ctx.journal.put(key, {"lanes": [lane.label for lane in lanes], "construct": what,
                              "focus": focus_prefix(ctx)},
                        ctx.now, kind=TranscriptEntry.Kind.TOOL_CALL)
        if ctx.source_less or (ctx.agents and any(
                isinstance(s, AgentCall) for lane in lanes for s in walk(lane.body))):
            _run_here(interp, step, lanes, key, pending)
        else:
            _fan_out(ctx, key, pending)
        _fresh(ctx)
        if not _joinable(ctx, step, key, lanes):
            ctx.record(key, what, "waiting", detail={"lanes": pending})
            raise Wait(key, kind=WorkflowWait.Kind.JOIN)
    _join(interp, step, env, key, lanes)


def run_lane(interp: _Interp, step: Concurrent, lane: Lane, key: str) -> None:
    """Run one lane to its end and journal it; a lane that waits raises `Wait`."""
    ctx = interp.ctx
    marker = lane_key(key, lane.label)
    if marker in _fresh(ctx).results:
        return
    def lost() -> bool:
        """Another lane of this race won: this one is cancelled."""
        return isinstance(step, Race) and race.winner(ctx, key) not in (None, lane.label)

    status, detail = "completed", {}
    try:
        for inner in lane.body:
            failpoint("workflow.lane_step")
            if lost():
                status = "cancelled"
                break
            interp.step(inner, lane.env, lane.loops)
        else:
            # A race lane that reached its end after another won lost: its steps were cancelled
            # (a call in flight abandoned through its context), and nothing of it is used.
            if lost():
                status = "cancelled"
    except Denied as denied:
        status, detail = "denied", {"code": denied.outcome.code, "at": denied.outcome.path}
    ctx.journal.put(marker, {"lane": lane.label, "status": status, **detail}, ctx.now)
    failpoint("workflow.lane_ended")
    if isinstance(step, Race):
        won = race.claim_win(ctx, key, lane.label) if status == "completed" else \
            race.winner(ctx, key)
        if won is not None:
            for other in step.branches:
                if other.name != won:
                    race.cancel_lane(ctx, step, other.name, lane.loops, won)
    ctx.record(marker, construct(step), status, detail={"lane": lane.label})
    deliver_if_joined(ctx, key, now=ctx.now)


def deliver_if_joined(ctx_or_id: RunContext | str, key: str, *, now: datetime) -> bool:
    """Once every lane of the step at `key` ended (a race: once one won, or all ended), mark its
    `join` wait delivered and wake it after the commit; whether this call delivered it."""
    execution_id = ctx_or_id if isinstance(ctx_or_id, str) else ctx_or_id.execution_id
    journal = Journal(execution_id)
    intent = journal.calls.get(key)
    if intent is None or not ended(journal, key, intent):
        return False
    with transaction.atomic():
        wait = WorkflowWait.objects.filter(execution_id=execution_id, step=key,
                                           kind=WorkflowWait.Kind.JOIN,
                                           state=WorkflowWait.State.PARKED,
                                           delivered_at__isnull=True).first()
        if wait is None or not WorkflowWait.objects.filter(
                id=wait.id, delivered_at__isnull=True).update(delivered_at=now,
                                                              delivered_by="system"):
            return False
        wake_on_input(wait.id)
    return True


def ended(journal: Journal, key: str, intent: JSONObject) -> bool:
    labels = [str(label) for label in intent["lanes"]]
    ends = [journal.results.get(lane_key(key, label)) for label in labels]
    if intent.get("construct") == "race" and race.winner_key(key) in journal.results:
        return True
    return all(end is not None for end in ends)


def _joinable(ctx: RunContext, step: Concurrent, key: str, lanes: list[Lane]) -> bool:
    return ended(ctx.journal, key, {"lanes": [lane.label for lane in lanes],
                                    "construct": construct(step)})


def _join(interp: _Interp, step: Concurrent, env: Env, key: str, lanes: list[Lane]) -> None:
    ctx = interp.ctx
    what = construct(step)
    if isinstance(step, Race):
        won = race.winner(ctx, key)
        if won is None:  # every lane ended refused: the first refusal is the race's
            first = next(lane for lane in lanes if ctx.journal.results[
                lane_key(key, lane.label)]["status"] == "denied")
            interp.block(first.body, first.env, first.loops)
        else:
            for branch in step.branches:
                if branch.name != won:
                    race.cancel_lane(ctx, step, branch.name, lanes[0].loops, won)
        # Whatever a race branch touched is unavailable after it (the checker): env stays.
        ctx.record(key, what, "won", detail={"winner": won or ""})
        return
    for lane in lanes:  # every lane ended: each replays from the journal, in order
        before = dict(lane.env)
        interp.block(lane.body, lane.env, lane.loops)
        if isinstance(step, Loop):
            for name in env:
                env[name] = lane.env[name]
        else:
            env.update({n: v for n, v in lane.env.items() if before.get(n) is not v})
    ctx.record(key, what, "joined", detail={"lanes": [lane.label for lane in lanes]})


def focus_prefix(ctx: RunContext) -> list[list[str]]:
    """The lanes this run has entered: a lane of a step inside them is reached through them."""
    return [list(pair) for pair in ctx.focus[:ctx.entered]]


def _fan_out(ctx: RunContext, key: str, pending: list[str]) -> None:
    for label in pending:
        transaction.on_commit(enqueue(ctx.execution_id, [*focus_prefix(ctx), [key, label]]))


def enqueue(execution_id: str, focus: list[list[str]]) -> Callable[[], None]:
    """The enqueueing of one lane's task (ids only), to run after the commit."""
    def send() -> None:
        current_app.tasks[BRANCH_TASK].delay(execution_id=execution_id, focus=focus)
    return send


def _run_here(interp: _Interp, step: Concurrent, lanes: list[Lane], key: str,
              pending: list[str]) -> None:
    """A source-less execution: its caller runs the lanes in turn (a lane that waits parks)."""
    for lane in lanes:
        if lane.label in pending:
            run_lane(interp, step, Lane(lane.label, lane.body, dict(lane.env), lane.loops), key)


def _fresh(ctx: RunContext) -> Journal:
    fresh = Journal(ctx.execution_id)
    ctx.journal.calls.update(fresh.calls)
    ctx.journal.results.update(fresh.results)
    return fresh


def after_park(execution_id: str, key: str, now: datetime) -> None:
    """The park of a `join` committed: lanes that ended meanwhile found nothing to deliver."""
    if Execution.objects.filter(id=execution_id).exists():
        deliver_if_joined(execution_id, key, now=now)
