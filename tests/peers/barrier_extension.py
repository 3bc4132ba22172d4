"""A test extension (extension API 1) whose destination is agentbarrier's sentinel effect.

agentbarrier's conformance harness (tests/peers/agentbarrier_adapter.py) hands every run an
`EffectProbe`: a fake destination that journals each effect outside our store, can stop just
before its commit, lose its answer before or after the commit, and answer lookups by the
action's identity. This module registers two contracts over it, one without and one with an
operator's approval (the harness says per action which it wants), and their handler, a client
of that destination like any other: it sends the approved snapshot, reports a lost answer as
`UncertainOutcome`, and answers reconciliation's lookups from the destination's journal.

The contracts declare what the probe is: it does not deduplicate (`idempotency none`: a second
call commits a second effect), and its lookup is authoritative both ways
(`presence_and_absence`: it reads the very journal the effect is written to).

The harness runs in an asyncio loop; our dispatcher runs the handler in a worker thread. The
adapter connects each action's identity to its run's probe and loop (`connect`); the handler
schedules the probe's coroutine on that loop and waits for it while it watches the attempt's
`HandlerContext.cancelled`: a cancellation that reaches it while the call waits at the
destination aborts the call, and the destination's own answer (aborted before its commit, or
committed) is what the handler reports.
"""

from __future__ import annotations

import asyncio
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from agentbarrier import ActionRequest, AmbiguousEffectError, ReconciliationStatus, action_digest
from agentbarrier.probe import EffectProbe

from dispatch.handlers import (
    DefiniteFailure,
    FromCode,
    Handler,
    HandlerContext,
    LookupResult,
    UncertainOutcome,
)
from dispatch.runtime import Runtime
from protocols.contracts import (
    ApprovalRequirement,
    AuthorityRequirement,
    Effect,
    Idempotency,
    OperationContract,
    Reconciliation,
    SchedulingContract,
)

EXTENSION_API = 1

#: The harness's one tool, and our contract for it without and with an operator's approval.
TOOL = "sentinel_write"
SENTINEL = "sentinel.write"
SENTINEL_GATED = "sentinel.write_gated"
CONTRACTS = {False: SENTINEL, True: SENTINEL_GATED}
#: The argument carrying the harness's stable action identity: part of the approved snapshot.
IDENTITY = "action"
#: The contract timeout, in seconds: how long a call may wait at the destination. It also sets
#: the delivery fence (3 timeouts) after which a lookup's absence proves that nothing happened.
TIMEOUT = 1.0

#: What our lookups say, as reconciliation records it (`Operation.evidence`, the audit).
PRESENT = "the destination holds one commit matching"
ABSENT = "the destination holds no commit of"
CONFLICT = "conflict: the destination holds"
UNAVAILABLE = "the destination could not answer"
#: What reconciliation adds to an absence found within the delivery fence.
STILL_IN_FLIGHT = "may still be delivered"
DIGEST = re.compile(r"\b[0-9a-f]{64}\b")

INPUT = {
    "type": "object",
    "additionalProperties": False,
    "required": [IDENTITY, "recipient", "amount"],
    "properties": {
        IDENTITY: {"type": "string", "minLength": 1, "maxLength": 200},
        "recipient": {"type": "string", "minLength": 1, "maxLength": 254},
        "amount": {"type": "integer"},
    },
}


def sentinel_contract(name: str, implementation_fingerprint: str, *,
                      approval: bool) -> OperationContract:
    return OperationContract(
        qualified_name=name,
        contract_version=1,
        implementation_fingerprint=implementation_fingerprint,
        input_type=INPUT,
        output_type={"type": "object"},
        authority_requirements=(AuthorityRequirement("recipient", "/recipient"),),
        possible_effects=frozenset({Effect.EXTERNAL_WRITE}),
        approval_requirement=ApprovalRequirement(role="operator", expires_in=3600)
        if approval else None,
        idempotency_contract=Idempotency.NONE,
        # Attempts are bounded by the runtime's retry rules, not here: with `none`, today's
        # runtime never repeats an uncertain attempt by itself.
        scheduling_contract=SchedulingContract(timeout=TIMEOUT, max_attempts=3, budget_cost=1),
        destination="agentbarrier_probe",
        reconciliation=Reconciliation.PRESENCE_AND_ABSENCE,
    )


def action_of(arguments: dict[str, Any]) -> ActionRequest:
    """The harness's action that these (stored, approved) arguments describe."""
    rest = dict(arguments)
    identity = rest.pop(IDENTITY)
    return ActionRequest(action_id=str(identity), tool_name=TOOL, arguments=rest)


@dataclass
class _Routes:
    """Which run's probe, on which event loop, an action identity is sent to."""

    _lock: threading.Lock = field(default_factory=threading.Lock)
    _routes: dict[str, tuple[EffectProbe, asyncio.AbstractEventLoop]] = field(
        default_factory=dict)

    def connect(self, action_ids: list[str], probe: EffectProbe,
                loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            for action_id in action_ids:
                self._routes[action_id] = (probe, loop)

    def get(self, action_id: str) -> tuple[EffectProbe, asyncio.AbstractEventLoop] | None:
        with self._lock:
            return self._routes.get(action_id)


ROUTES = _Routes()
connect = ROUTES.connect


class _Call:
    """One call of the probe, scheduled on its loop from the handler's thread; its outcome is
    the destination's own: a result, an error, or aborted (cancelled before its commit)."""

    def __init__(self, probe: EffectProbe, loop: asyncio.AbstractEventLoop,
                 action: ActionRequest) -> None:
        self._loop = loop
        self._done = threading.Event()
        self.outcome: tuple[str, Any] = ("pending", None)

        async def start() -> asyncio.Task[str]:
            task = asyncio.ensure_future(probe(action))
            task.add_done_callback(self._settle)
            return task

        self._task = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=TIMEOUT)

    def _settle(self, task: asyncio.Task[str]) -> None:  # in the loop's thread
        if task.cancelled():
            self.outcome = ("aborted", None)
        elif task.exception() is not None:
            self.outcome = ("error", task.exception())
        else:
            self.outcome = ("result", task.result())
        self._done.set()

    def wait(self, timeout: float) -> bool:
        return self._done.wait(timeout)

    def abort(self) -> None:
        self._loop.call_soon_threadsafe(self._task.cancel)


class SentinelHandler(Handler):
    name = SENTINEL
    implementation_fingerprint = FromCode()

    def destination(self) -> dict[str, Any]:
        return {"name": "agentbarrier_probe", "address": "in-process"}

    def perform(self, ctx: HandlerContext) -> dict[str, Any]:
        action = action_of(ctx.arguments)
        route = ROUTES.get(action.action_id)
        if route is None:
            raise DefiniteFailure(f"no destination is connected for {action.action_id}; "
                                  "nothing was sent")
        if ctx.cancelled.is_set():
            raise DefiniteFailure("cancelled before the effect; nothing was sent")
        call = _Call(*route, action)
        aborting = False
        while not call.wait(0.01):
            if not aborting and ctx.cancelled.is_set():
                call.abort()  # the destination says below whether it stopped in time
                aborting = True
            elif not aborting and ctx.remaining() <= 0:
                raise UncertainOutcome(f"no answer within the contract timeout of "
                                       f"{ctx.timeout:g}s; the call may still commit")
        kind, value = call.outcome
        if kind == "aborted":
            raise DefiniteFailure("the destination aborted the call before its commit"
                                  + (" (cancelled)" if aborting else ""))
        if kind == "error":
            if isinstance(value, AmbiguousEffectError):
                raise UncertainOutcome(str(value))
            raise UncertainOutcome(f"{type(value).__name__}: {value}")
        return {"destination": str(value)}

    def lookup(self, operation_id: str, snapshot: dict[str, Any]) -> LookupResult:
        action = action_of(snapshot["arguments"])
        route = ROUTES.get(action.action_id)
        if route is None:
            return LookupResult("unknown", f"{UNAVAILABLE}: no destination is connected")
        probe, loop = route
        # Reconciliation bounds the wait (`lookup_bounded`); this bound only ends the thread.
        evidence = asyncio.run_coroutine_threadsafe(probe.reconcile(action), loop).result(
            timeout=60)
        expected = action_digest(action)
        if evidence.action_id != action.action_id or (
                evidence.expected_action_digest != expected):
            return LookupResult("unknown", f"{UNAVAILABLE}: the answer names another action")
        seen = ", ".join(evidence.observed_action_digests)
        if evidence.status is ReconciliationStatus.COMMITTED:
            return LookupResult("present", f"{PRESENT} {action.action_id}: {seen}")
        if evidence.status is ReconciliationStatus.NOT_COMMITTED:
            return LookupResult("absent", f"{ABSENT} {action.action_id}")
        if evidence.status is ReconciliationStatus.CONFLICT:
            count = len(evidence.observed_action_digests)
            return LookupResult("unknown", f"{CONFLICT} {count} commit records of "
                                           f"{action.action_id}: {seen}")
        return LookupResult("unknown", f"{UNAVAILABLE}: {evidence.detail}")


class GatedSentinelHandler(SentinelHandler):
    name = SENTINEL_GATED
    implementation_fingerprint = FromCode()


HANDLERS = {False: SentinelHandler(), True: GatedSentinelHandler()}


def register(runtime: Runtime) -> None:
    for approval, handler in HANDLERS.items():
        runtime.register(sentinel_contract(handler.name, handler.implementation_fingerprint,
                                           approval=approval), handler)
