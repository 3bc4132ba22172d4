"""The demo contracts' handlers (DESIGN §8): the SMTP sink, the fake bank and an in-memory CRM.

Each implements the handler port (`dispatch.handlers.Handler`). `HANDLERS` is what
`demo.extension.register` installs; a test swaps an entry there to re-register a contract
under another implementation fingerprint.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from demo.destinations.bank_client import bank_lookup, bank_transfer
from demo.destinations.smtp_client import send_email
from demo.destinations.smtp_sink import lookup_message
from dispatch.handlers import (
    DefiniteFailure,
    FromCode,
    Handler,
    HandlerContext,
    LookupFailedError,
    LookupResult,
    within_deadline,
)

__all__ = ["CUSTOMERS", "HANDLERS", "CrmLookupHandler", "EmailSendHandler",
           "PaymentsTransferHandler"]


def _timeout(ctx: HandlerContext) -> float:
    """One socket wait: never past the call's deadline, nor the deployment's cap."""
    return float(max(0.01, min(ctx.remaining(), ctx.timeout, settings.HANDLER_TIMEOUT_CAP)))


def _before_effect(ctx: HandlerContext) -> None:
    if ctx.cancelled.is_set():
        raise DefiniteFailure("cancelled before the effect; nothing was sent")


class EmailSendHandler(Handler):
    name = "email.send"
    implementation_fingerprint = FromCode("demo.destinations.smtp_client",
                                          "demo.destinations.smtp_sink")

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
    implementation_fingerprint = FromCode("demo.destinations.bank_client")

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
    implementation_fingerprint = FromCode()

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
