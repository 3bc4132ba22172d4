"""Handlers of the demo contracts and the context only the dispatcher gives them (spec §7).

A protected handler runs only through `Handler.invoke`, which first checks in the store that
its operation holds a committed claim and that this exact attempt was started and has not
ended. Calling it any other way raises `UnclaimedInvocationError` before any I/O.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from django.conf import settings

from dispatch.destinations.bank_client import bank_lookup, bank_transfer
from dispatch.destinations.errors import DefiniteFailure, LookupFailedError, UncertainOutcome
from dispatch.destinations.smtp_client import send_email
from dispatch.destinations.smtp_sink import lookup_message

__all__ = [
    "HANDLERS",
    "DefiniteFailure",
    "Handler",
    "HandlerContext",
    "LookupResult",
    "UncertainOutcome",
    "UnclaimedInvocationError",
]


class UnclaimedInvocationError(RuntimeError):
    """A protected handler was called without a started attempt of a claimed operation."""


@dataclass(frozen=True)
class HandlerContext:
    operation_id: str  # also the destination's idempotency key
    attempt: int
    snapshot: dict[str, Any]  # the authorized canonical snapshot, exactly as approved
    timeout: float
    principal_id: str = ""  # the requesting principal: nested calls run under its authority
    execution_id: str = ""
    nested_calls: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    cancelled: threading.Event = field(default_factory=threading.Event)

    @property
    def arguments(self) -> dict[str, Any]:
        return dict(self.snapshot["arguments"])


@dataclass(frozen=True)
class LookupResult:
    found: Literal["present", "absent", "unknown"]
    evidence: str


class Handler:
    name: ClassVar[str]
    implementation_fingerprint: ClassVar[str]

    def destination(self) -> dict[str, Any]:
        raise NotImplementedError

    def invoke(self, ctx: HandlerContext) -> dict[str, Any]:
        from dispatch.models import Attempt

        started = Attempt.objects.filter(
            operation_id=ctx.operation_id, number=ctx.attempt, ended_at__isnull=True,
            operation__state="claimed", operation__operation=self.name,
        ).exists()
        if not started:
            raise UnclaimedInvocationError(
                f"{self.name}: operation {ctx.operation_id} attempt {ctx.attempt} holds no claim")
        return self._perform(ctx)

    def _perform(self, ctx: HandlerContext) -> dict[str, Any]:
        raise NotImplementedError

    def lookup(self, operation_id: str, snapshot: dict[str, Any]) -> LookupResult:
        """Reconciliation: ask the destination whether this operation's effect happened."""
        return LookupResult("unknown", "this destination offers no lookup")


def _timeout(ctx: HandlerContext) -> float:
    return float(min(ctx.timeout, settings.HANDLER_TIMEOUT_CAP))


class EmailSendHandler(Handler):
    name = "email.send"
    implementation_fingerprint = "email.send/smtp-sink@1"

    def destination(self) -> dict[str, Any]:
        cfg = settings.DESTINATIONS
        return {"name": "smtp_sink", "address": f"{cfg['smtp_host']}:{cfg['smtp_port']}"}

    def _perform(self, ctx: HandlerContext) -> dict[str, Any]:
        draft = ctx.arguments["draft"]["payload"]
        cfg = settings.DESTINATIONS
        message_id = f"{ctx.operation_id}@console.invalid"
        send_email(
            cfg["smtp_host"], int(cfg["smtp_port"]), message_id=message_id,
            sender=draft["from"], to=list(draft["to"]), cc=list(draft["cc"]),
            subject=draft["subject"], body=draft["body"], timeout=_timeout(ctx),
        )
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

    def _perform(self, ctx: HandlerContext) -> dict[str, Any]:
        a = ctx.arguments
        return bank_transfer(
            settings.DESTINATIONS["bank_url"], key=ctx.operation_id,
            from_account=a["from_account"], to_account=a["to_account"], amount=a["amount"],
            currency=a["currency"], memo=a["memo"], timeout=_timeout(ctx),
        )

    def lookup(self, operation_id: str, snapshot: dict[str, Any]) -> LookupResult:
        try:
            found = bank_lookup(settings.DESTINATIONS["bank_url"], operation_id, timeout=5.0)
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

    def _perform(self, ctx: HandlerContext) -> dict[str, Any]:
        customer = ctx.arguments["customer_id"]
        if customer not in CUSTOMERS:
            raise DefiniteFailure(f"no customer {customer}")
        return {"customer_id": customer, **CUSTOMERS[customer]}


HANDLERS: dict[str, Handler] = {
    h.name: h for h in (EmailSendHandler(), PaymentsTransferHandler(), CrmLookupHandler())
}
