"""Steps 8-9 of the dispatcher (docs/design.md#dispatcher, #outcomes), on a worker: run the handler
of a claimed operation, at most once per started attempt, and record what it answered.

Every outcome names the attempt it settles (`operation_move`), so a late answer of an older
attempt is kept as evidence, never as the outcome. A worker runs only what was approved: the
destination and policy of the approved snapshot, or nothing (`contract_mismatch`).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from dispatch.failpoints import failpoint, failpoint_payload
from dispatch.handlers import (
    Cancellation,
    DefiniteFailure,
    Handler,
    HandlerContext,
    UncertainOutcome,
    UnclaimedInvocationError,
)
from dispatch.models import Attempt, Operation, Proposal
from dispatch.observability.context import bind_ids
from dispatch.observability.tracing import note, span
from dispatch.runtime import Runtime, get_runtime
from dispatch.services.admission import deployment_refusal
from dispatch.services.attempts import attempt_next, open_attempt, retry_refusal
from dispatch.services.operations import (
    StartedAttempt,
    attempt_answer_ignored,
    attempt_hold,
    attempt_start,
    operation_move,
)
from dispatch.services.permit_tokens import permit_token
from dispatch.store import loads
from dispatch.store import operations as store
from protocols.backoff import retry_delay
from protocols.contracts import OperationContract, SchedulingContract
from protocols.denials import DenialCode
from protocols.jsontypes import JSONObject
from protocols.lifecycle import OperationEvent, OperationState
from protocols.outcomes import ATTEMPT_OUTCOMES

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def operation_execute(*, operation_id: str, clock: Clock = timezone.now) -> Operation:
    """Run the handler for a claimed operation, at most once per started attempt.

    A redelivered or duplicate task finds the attempt already started (or the operation
    settled) and returns without any I/O. Retries of an uncertain attempt happen here only
    for retry-safe contracts, with the same key, while authority and approval stay valid.
    """
    runtime = get_runtime()
    operation = _operation_for_worker(operation_id)
    bind_ids(tenant=operation.tenant_id, principal=operation.principal_id,
             proposal_id=operation.proposal_id, operation_id=operation.id)
    contract = runtime.registry.by_fingerprint(operation.contract_fingerprint)
    if contract is None:
        _refuse_to_run(operation, "the contract is no longer registered", clock(),
                       timeout=SchedulingContract().timeout)
        return operation
    drift = deployment_drift(runtime, contract, operation.proposal)
    if drift is not None:
        _refuse_to_run(operation, drift, clock(), timeout=contract.scheduling_contract.timeout)
        return operation
    started = _next_attempt(operation, contract, clock())
    if started is None:
        return operation
    return operation_run(operation, contract, started, clock=clock)


def operation_run(
    operation: Operation, contract: OperationContract, started: StartedAttempt, *,
    clock: Clock = timezone.now,
) -> Operation:
    """Steps 8-9 for the attempt `started` in this process (by `_next_attempt`, or by the claim
    itself: `proposal_claim_and_start`): run the handler, record what it answered, and retry
    under the same key where the contract allows it."""
    number = started.number
    handler = get_runtime().handler(contract)
    snapshot = json.loads(operation.proposal.canonical)
    cancelled = Cancellation(probe=_cancelled_probe(operation.proposal_id))
    asked_wait: list[float] = []  # the destination's Retry-After of the attempt, if any
    while True:
        ctx = HandlerContext(operation_id=operation.id, attempt=number,
                             snapshot=failpoint_payload("attempt.payload", snapshot),
                             permit_token=permit_token(operation, contract),
                             timeout=contract.scheduling_contract.timeout,
                             principal_id=operation.principal_id,
                             execution_id=operation.execution_id, cancelled=cancelled,
                             deadline=time.monotonic() + contract.scheduling_contract.timeout)
        asked_wait.clear()
        # The attempt: the handler's call and its requests to the destination, in its span.
        with span("dispatch.attempt", operation_id=operation.id,
                  proposal_id=operation.proposal_id, operation=contract.qualified_name,
                  attempt=number) as attempt:
            outcome, result, error = _run_handler(handler, ctx, contract, started, asked_wait)
            note(attempt, outcome=outcome)
        log.info("attempt %s of %s ended %s", number, contract.qualified_name, outcome)
        failpoint("attempt.before_outcome")
        now = clock()
        retry_reason = None
        if outcome == Attempt.Outcome.UNCERTAIN:
            retry_reason = ("the same key gets the same answer" if error.startswith(
                OUTPUT_INVALID) else retry_refusal(operation, contract, number, now))
            if retry_reason is None:
                # Same key: the destination deduplicates. The attempt ends uncertain and the
                # operation stays claimed; after the backoff, `attempt_next` checks everything
                # again in the transaction that starts the next attempt.
                delay = backoff(contract, number, asked_wait[0] if asked_wait else None)
                if delay is None:
                    # The destination asked to wait past the cap: no retry sooner than asked.
                    _record_outcome(operation, number, outcome, result, (
                        f"{error}; no retry: the destination asked to wait "
                        f"{asked_wait[0]:g}s, longer than the backoff's cap"), now)
                    break
                if not attempt_hold(operation, number, error, now,
                                    retry_at=now + timedelta(seconds=delay)):
                    break  # settled meanwhile (reconciliation past the timeout)
                failpoint("attempt.before_retry")
                time.sleep(delay)
                retried = attempt_next(operation=operation, contract=contract, now=clock())
                if retried is None:
                    break
                started, number = retried, retried.number
                continue
        _record_outcome(operation, number, outcome, result,
                        f"{error}; no retry: {retry_reason}" if retry_reason else error, now)
        break
    return operation


def _operation_for_worker(operation_id: str) -> Operation:
    """The operation with its proposal, principal and permit, in one fixed query."""
    operation = store.load_for_worker(id=operation_id)
    if operation is None:
        raise Operation.DoesNotExist(operation_id)
    return operation


def deployment_drift(
    runtime: Runtime, contract: OperationContract, proposal: Proposal
) -> str | None:
    """Why this deployment no longer runs what was approved, or None: recovery checks the
    contract, handler, destination and policy fingerprints before any attempt, however late
    (docs/design.md#outcomes)."""
    refusal = deployment_refusal(runtime, contract, proposal)
    if refusal is None:
        return None
    what = refusal.details.get("reason", "the contract changed")
    return f"{refusal.code.value}: {what} since the proposal"


def _refuse_to_run(operation: Operation, reason: str, now: datetime, *, timeout: float) -> None:
    """Nothing is sent. The operation ends by its history (`operation_move`): no effect if no
    attempt may have had one, else unknown, for a human or a lookup to settle. An attempt a
    lost worker left open past `timeout` is ended uncertain on the way; within its timeout it
    belongs to a worker that may be running it, which settles it (or reconciliation does)."""
    if operation.state != OperationState.CLAIMED:
        return
    details = {"code": DenialCode.CONTRACT_MISMATCH.value, "reason": reason}
    number = operation.attempts_made
    running = open_attempt(operation)
    if running is None:
        operation_move(operation, OperationEvent.FAIL_NO_EFFECT, attempt=number,
                       now=now, actor="dispatcher", error=reason,
                       evidence=f"retry refused: {reason}" if operation.uncertain else None,
                       details=details)
    elif (now - running.started_at).total_seconds() >= timeout:
        # Its worker is presumed lost (the contract timeout passed) and it may have sent.
        operation_move(operation, OperationEvent.UNCERTAIN, attempt=number,
                       now=now, actor="dispatcher", end_attempt=Attempt.Outcome.UNCERTAIN,
                       error=f"the worker was lost mid-attempt; no retry: {reason}",
                       evidence=f"retry refused: {reason}", details=details)


def _cancelled_probe(proposal_id: str) -> Callable[[], bool]:
    def probe() -> bool:
        return loads.proposal_cancelled(id=proposal_id)
    return probe


def _next_attempt(
    operation: Operation, contract: OperationContract, now: datetime
) -> StartedAttempt | None:
    """Start the next attempt, or None when the store does not allow one now.

    The first is the claim's (it checked everything); every later one is `attempt_next`'s.
    An attempt left open by a worker that died is repeated only for a retry-safe contract,
    once the contract timeout has passed; otherwise reconciliation makes it unknown.
    """
    if operation.state != OperationState.CLAIMED:
        return None
    if operation.attempts_made == 0:
        return attempt_start(operation, 1, now)
    running = open_attempt(operation)
    if running is None:
        if operation.next_attempt_at is not None and now < operation.next_attempt_at:
            return None  # a worker waits out the backoff and starts it (a duplicate task)
        return attempt_next(operation=operation, contract=contract, now=now)
    elapsed = (now - running.started_at).total_seconds()
    if elapsed < contract.scheduling_contract.timeout or retry_refusal(
            operation, contract, running.number, now) is not None:
        return None
    return attempt_next(operation=operation, contract=contract, now=now,
                        lost_error="the worker was lost mid-attempt")


def handler_invoke(
    handler: Handler, ctx: HandlerContext, started: StartedAttempt | None = None,
) -> JSONObject:
    """THE entry point to a protected handler (docs/design.md#dispatcher): it runs only for a
    started, open attempt of an operation that holds a committed claim, of this handler's operation;
    anything else raises `UnclaimedInvocationError` before any I/O. `started`, minted by the
    attempt's own conditional start in this process, is that proof; without it the store is
    asked."""
    if started is not None and (started.operation_id, started.number, started.operation) == (
            ctx.operation_id, ctx.attempt, handler.name):
        return handler.perform(ctx)
    held = Attempt.objects.filter(
        operation_id=ctx.operation_id, number=ctx.attempt, ended_at__isnull=True,
        operation__state=OperationState.CLAIMED, operation__operation=handler.name,
    ).exists()
    if not held:
        raise UnclaimedInvocationError(
            f"{handler.name}: operation {ctx.operation_id} attempt {ctx.attempt} holds no claim")
    return handler.perform(ctx)


def backoff(contract: OperationContract, number: int,
            retry_after: float | None) -> float | None:
    """The wait after uncertain attempt `number` (`protocols.backoff`): the contract's base
    delay and cap, else the deployment's, with full jitter and the destination's Retry-After;
    None when the destination asked to wait past the cap."""
    scheduling = contract.scheduling_contract
    base = scheduling.retry_base_delay
    cap = scheduling.retry_max_delay
    return retry_delay(
        number, base=float(settings.RETRY_BACKOFF_SECONDS) if base is None else base,
        cap=float(settings.RETRY_BACKOFF_MAX_SECONDS) if cap is None else cap,
        jitter=_JITTER.random(), retry_after=retry_after)


#: The jitter's source: spreading retries needs no secret, only independence across workers.
_JITTER = random.SystemRandom()


def _run_handler(
    handler: Handler, ctx: HandlerContext, contract: OperationContract, started: StartedAttempt,
    asked_wait: list[float],
) -> tuple[str, JSONObject | None, str]:
    """The attempt's outcome, result and error; an uncertain answer's `Retry-After` is
    appended to `asked_wait`."""
    failpoint("attempt.before_call")
    try:
        result = handler_invoke(handler, ctx, started)
        failpoint("attempt.after_effect")
    except DefiniteFailure as exc:
        return Attempt.Outcome.FAILED_NO_EFFECT, None, exc.reason
    except UncertainOutcome as exc:
        if exc.retry_after is not None:
            asked_wait.append(exc.retry_after)
        return Attempt.Outcome.UNCERTAIN, None, exc.reason
    except Exception as exc:  # a handler bug: it may have written before failing
        log.exception("handler %s failed", contract.qualified_name)
        return _unusable(contract), None, f"{type(exc).__name__}: {exc}"
    # Step 9: the result is checked against the contract before it is kept or handed back,
    # and must be a JSON value the store can keep.
    try:
        json.dumps(result, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return _unusable(contract), None, f"{OUTPUT_INVALID}: /result is not JSON ({exc})"
    problems = contract.output_errors(result)
    if problems:
        first = problems[0]
        return _unusable(contract), None, (
            f"{OUTPUT_INVALID}: {first['pointer']} {first['message']}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    return Attempt.Outcome.COMPLETED, result, ""


#: How an attempt's error starts when the handler answered, but not as its contract says.
OUTPUT_INVALID = "the handler's result does not match the contract's output_type"


def _unusable(contract: OperationContract) -> str:
    """The outcome of an answer that cannot be used: a read had no effect; anything that may
    have written may have (docs/design.md#dispatcher), and only a lookup or a human can settle
    it."""
    read_only = {e.value for e in contract.possible_effects} <= {"read"}
    return Attempt.Outcome.FAILED_NO_EFFECT if read_only else Attempt.Outcome.UNCERTAIN


def _record_outcome(
    operation: Operation, number: int, outcome: str, result: JSONObject | None,
    error: str, now: datetime,
) -> None:
    """Step 9. If the outcome cannot be recorded after an effect, record `unknown`."""
    with span("dispatch.outcome", operation_id=operation.id, proposal_id=operation.proposal_id,
              attempt=number, outcome=outcome):
        _record_or_unknown(operation, number, outcome, result, error, now)


def _record_or_unknown(
    operation: Operation, number: int, outcome: str, result: JSONObject | None,
    error: str, now: datetime,
) -> None:
    try:
        _settle_attempt(operation, number, outcome, result, error, now)
    except Exception:  # a store error, or a value it could not take: never lose the attempt
        log.exception("could not record the outcome of %s; recording unknown", operation.id)
        if outcome == Attempt.Outcome.UNCERTAIN:
            return  # reconciliation moves a stale claim to unknown
        # A failure to persist after an effect is unknown, never a silent success or failure.
        try:
            _settle_attempt(operation, number, Attempt.Outcome.UNCERTAIN, None,
                            f"outcome {outcome} could not be recorded", now)
        except Exception:
            log.exception("could not record unknown for %s either", operation.id)


def _settle_attempt(
    operation: Operation, number: int, outcome: str, result: JSONObject | None,
    error: str, now: datetime,
) -> None:
    moved = operation_move(
        operation, ATTEMPT_OUTCOMES[Attempt.Outcome(outcome)], attempt=number,
        now=now, actor="dispatcher", end_attempt=outcome, error=error, result=result)
    if not moved:
        attempt_answer_ignored(operation=operation, attempt=number, outcome=outcome,
                               error=error, now=now)
