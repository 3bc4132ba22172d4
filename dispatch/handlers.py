"""The handler port and the context only the dispatcher gives a handler (spec §7), with the
demo contracts' handlers.

A protected handler runs only through the dispatcher's invoke path
(`dispatch.services.execution.handler_invoke`), which first checks in the store that its
operation holds a committed claim and that this exact attempt was started and has not ended;
otherwise it raises `UnclaimedInvocationError` before any I/O.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, TypeVar

from django.conf import settings

from dispatch.destinations.bank_client import bank_lookup, bank_transfer
from dispatch.destinations.errors import DefiniteFailure, LookupFailedError, UncertainOutcome
from dispatch.destinations.smtp_client import send_email
from dispatch.destinations.smtp_sink import lookup_message

__all__ = [
    "HANDLERS",
    "Cancellation",
    "DefiniteFailure",
    "Handler",
    "HandlerContext",
    "LookupResult",
    "UncertainOutcome",
    "UnclaimedInvocationError",
    "within_deadline",
]

T = TypeVar("T")


class UnclaimedInvocationError(RuntimeError):
    """A protected handler was called without a started attempt of a claimed operation."""


class Cancellation:
    """Set when the action is cancelled while its attempt runs (spec §9).

    `is_set()` also asks the store through `probe` (at most every `interval` seconds), so a
    handler that checks right before its effect sees a cancellation committed by any process.
    A handler that honours it raises `DefiniteFailure` before the effect: the outcome is then
    `failed_no_effect`; after the effect it reports what happened, as always.
    """

    def __init__(self, probe: Callable[[], bool] | None = None, interval: float = 0.1) -> None:
        self._event = threading.Event()
        self._probe = probe
        self._interval = interval
        self._asked_at = -math.inf

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        if self._event.is_set():
            return True
        if self._probe is not None and time.monotonic() - self._asked_at >= self._interval:
            self._asked_at = time.monotonic()
            if self._probe():
                self._event.set()
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a cancellation; True if it came."""
        deadline = time.monotonic() + timeout
        while not self.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._event.wait(min(remaining, self._interval))
        return True


@dataclass(frozen=True)
class HandlerContext:
    operation_id: str  # also the destination's idempotency key
    attempt: int
    snapshot: dict[str, Any]  # the authorized canonical snapshot, exactly as approved
    timeout: float
    principal_id: str = ""  # the requesting principal: nested calls run under its authority
    execution_id: str = ""
    nested_calls: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    cancelled: Cancellation = field(default_factory=Cancellation)
    # time.monotonic() by which the whole call must have answered: the contract timeout.
    deadline: float = math.inf

    @property
    def arguments(self) -> dict[str, Any]:
        return dict(self.snapshot["arguments"])

    @property
    def destination(self) -> dict[str, Any]:
        """The destination of the approved snapshot: where this attempt must send."""
        return dict(self.snapshot["destination"])

    def remaining(self) -> float:
        return self.deadline - time.monotonic()


def within_deadline(ctx: HandlerContext, call: Callable[[], T]) -> T:
    """Run one destination call so that the handler answers by the contract timeout, however
    slowly the destination drips its reply (a timeout bounds each socket wait, not the call).

    Past the deadline the request may have been sent: `UncertainOutcome`, never no effect.
    The abandoned call runs on in a daemon thread until its own socket timeouts end it.
    """
    remaining = ctx.remaining()
    if remaining <= 0:
        raise DefiniteFailure("no time left before the contract timeout; nothing was sent")
    if math.isinf(remaining):
        return call()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc

    worker = threading.Thread(target=run, name=f"call-{ctx.operation_id}", daemon=True)
    worker.start()
    worker.join(remaining)
    if worker.is_alive():
        raise UncertainOutcome(f"no answer within the contract timeout of {ctx.timeout:g}s; "
                               "the request may have been received")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


@dataclass(frozen=True)
class LookupResult:
    found: Literal["present", "absent", "unknown"]
    evidence: str


class Handler(Protocol):
    """The handler port (spec §7): what a trusted implementation of a contract provides.

    `perform` does the effect for one started attempt; only the dispatcher's invoke path
    (`dispatch.services.execution.handler_invoke`) calls it, after checking in the store that
    the attempt holds a committed claim. `lookup` answers reconciliation; a handler that
    inherits this one's says "unknown".
    """

    name: ClassVar[str]
    implementation_fingerprint: ClassVar[str]

    def destination(self) -> dict[str, Any]:
        """Where this handler sends, as the snapshot binds it (its fingerprint is checked)."""
        ...

    def perform(self, ctx: HandlerContext) -> dict[str, Any]:
        """Do the effect; raise `DefiniteFailure` only when it certainly did not happen and
        `UncertainOutcome` when it may have."""
        ...

    def lookup(self, operation_id: str, snapshot: dict[str, Any]) -> LookupResult:
        """Reconciliation: ask the destination whether this operation's effect happened."""
        return LookupResult("unknown", "this destination offers no lookup")


def _timeout(ctx: HandlerContext) -> float:
    """One socket wait: never past the call's deadline, nor the deployment's cap."""
    return float(max(0.01, min(ctx.remaining(), ctx.timeout, settings.HANDLER_TIMEOUT_CAP)))


def _before_effect(ctx: HandlerContext) -> None:
    if ctx.cancelled.is_set():
        raise DefiniteFailure("cancelled before the effect; nothing was sent")


class EmailSendHandler(Handler):
    name = "email.send"
    implementation_fingerprint = "email.send/smtp-sink@1"

    def destination(self) -> dict[str, Any]:
        cfg = settings.DESTINATIONS
        return {"name": "smtp_sink", "address": f"{cfg['smtp_host']}:{cfg['smtp_port']}"}

    def perform(self, ctx: HandlerContext) -> dict[str, Any]:
        draft = ctx.arguments["draft"]["payload"]
        host, _, port = str(ctx.destination["address"]).rpartition(":")
        message_id = f"{ctx.operation_id}@console.invalid"
        _before_effect(ctx)
        within_deadline(ctx, lambda: send_email(
            host, int(port), message_id=message_id,
            sender=draft["from"], to=list(draft["to"]), cc=list(draft["cc"]),
            subject=draft["subject"], body=draft["body"], timeout=_timeout(ctx),
        ))
        return {"message_id": message_id}

    def lookup(self, operation_id: str, snapshot: dict[str, Any]) -> LookupResult:
        message_id = f"{operation_id}@console.invalid"
        found = lookup_message(settings.DESTINATIONS["dir"], message_id)
        if found is not None:
            return LookupResult("present", f"SMTP sink holds message {message_id}")
        # Absence in a mail system is not proof that nothing was sent: a human decides.
        return LookupResult("unknown", f"SMTP sink holds no message {message_id}")


class PaymentsTransferHandler(Handler):
    name = "payments.transfer"
    implementation_fingerprint = "payments.transfer/fake-bank@1"

    def destination(self) -> dict[str, Any]:
        return {"name": "bank", "address": settings.DESTINATIONS["bank_url"]}

    def perform(self, ctx: HandlerContext) -> dict[str, Any]:
        a = ctx.arguments
        _before_effect(ctx)
        return within_deadline(ctx, lambda: bank_transfer(
            str(ctx.destination["address"]), key=ctx.operation_id,
            from_account=a["from_account"], to_account=a["to_account"], amount=a["amount"],
            currency=a["currency"], memo=a["memo"], timeout=_timeout(ctx),
        ))

    def lookup(self, operation_id: str, snapshot: dict[str, Any]) -> LookupResult:
        try:
            found = bank_lookup(str(snapshot["destination"]["address"]), operation_id,
                                timeout=5.0)
        except LookupFailedError as exc:
            return LookupResult("unknown", f"bank lookup failed: {exc.reason}")
        if found is None:
            # The bank deduplicates on the key, so a retry with the same key is safe.
            return LookupResult("absent", f"bank has no transfer with key {operation_id}")
        return LookupResult("present", f"bank holds transfer {operation_id}")


CUSTOMERS = {
    "cus-001": {"name": "Ada Lovelace", "tier": "gold"},
    "cus-002": {"name": "Grace Hopper", "tier": "silver"},
}


class CrmLookupHandler(Handler):
    name = "crm.lookup"
    implementation_fingerprint = "crm.lookup/in-memory@1"

    def destination(self) -> dict[str, Any]:
        return {"name": "crm", "address": "in-process"}

    def perform(self, ctx: HandlerContext) -> dict[str, Any]:
        customer = ctx.arguments["customer_id"]
        if customer not in CUSTOMERS:
            raise DefiniteFailure(f"no customer {customer}")
        return {"customer_id": customer, **CUSTOMERS[customer]}


HANDLERS: dict[str, Handler] = {
    h.name: h for h in (EmailSendHandler(), PaymentsTransferHandler(), CrmLookupHandler())
}
