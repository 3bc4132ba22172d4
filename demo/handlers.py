"""The demo contracts' handlers (docs/design.md#demo, #evidence): the SMTP sink, the fake bank, an
in-memory CRM, the source server, the validator and the publisher.

Each implements the handler port (`dispatch.handlers.Handler`). `HANDLERS` is what
`demo.extension.register` installs; a test swaps an entry there to re-register a contract
under another implementation fingerprint.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from demo.destinations.bank_client import bank_lookup, bank_transfer
from demo.destinations.http_client import Permit
from demo.destinations.publisher_client import publication_lookup, publish
from demo.destinations.smtp_client import send_email, sink_lookup
from demo.destinations.source_client import fetch_source
from demo.hooks import source_allowlist
from dispatch.handlers import (
    DefiniteFailure,
    FromCode,
    Handler,
    HandlerContext,
    LookupFailedError,
    LookupResult,
    within_deadline,
)
from dispatch.services.evidence import attestation_judge
from protocols.permit_tokens import snapshot_text
from protocols.sources import source_allowed

__all__ = ["CUSTOMERS", "HANDLERS", "CrmLookupHandler", "EmailSendHandler",
           "EvidenceAttestHandler", "PaymentsTransferHandler", "ReportPublishHandler",
           "ResearchFetchHandler"]


def _timeout(ctx: HandlerContext) -> float:
    """One socket wait: never past the call's deadline, nor the deployment's cap."""
    return float(max(0.01, min(ctx.remaining(), ctx.timeout, settings.HANDLER_TIMEOUT_CAP)))


def _permit(ctx: HandlerContext) -> Permit | None:
    """The attempt's permit token and the snapshot it binds, as the destination checks them
    (docs/permit-tokens.md); None when the dispatcher minted none."""
    return Permit(ctx.permit_token, snapshot_text(ctx.snapshot)) if ctx.permit_token else None


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
        # The sink's own lookup over the network (SMTP_SINK_LOOKUP_URL), never its folder.
        try:
            found = sink_lookup(str(settings.DESTINATIONS["smtp_lookup_url"]), message_id,
                                timeout=5.0)
        except LookupFailedError as exc:
            return LookupResult("unknown", f"SMTP sink lookup failed: {exc.reason}")
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
            currency=a["currency"], memo=a["memo"], timeout=_timeout(ctx), permit=_permit(ctx),
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


def _read_allowed(url: str, timeout: float) -> bytes:
    """The bytes an allow-listed source serves now; anything else is refused unread."""
    if not source_allowed(url, source_allowlist()):
        raise DefiniteFailure(f"{url} is not on the deployment's source allow-list; not read")
    return fetch_source(url, timeout=timeout)


class ResearchFetchHandler(Handler):
    """Retrieve one source's text; the dispatcher issues the receipt over its exact bytes."""

    name = "research.fetch"
    implementation_fingerprint = FromCode("demo.destinations.source_client",
                                          "dispatch.services.evidence")

    def destination(self) -> dict[str, Any]:
        return {"name": "sources", "allow": source_allowlist()}

    def perform(self, ctx: HandlerContext) -> dict[str, Any]:
        url = str(ctx.arguments["source"])
        _before_effect(ctx)
        data = within_deadline(ctx, lambda: _read_allowed(url, _timeout(ctx)))
        try:
            # Strict UTF-8: the text encodes back to exactly the bytes retrieved, which is
            # what the receipt's digest is over.
            return {"content": data.decode("utf-8")}
        except UnicodeDecodeError as exc:
            raise DefiniteFailure(f"{url} is not UTF-8 text (invalid byte at offset "
                                  f"{exc.start}); no receipt") from None


class EvidenceAttestHandler(Handler):
    """Judge one report revision by the validator serving its policy (a read of each cited
    source); the dispatcher issues the attestation."""

    name = "evidence.attest"
    implementation_fingerprint = FromCode("demo.destinations.source_client",
                                          "dispatch.services.evidence", "protocols.evidence")

    def destination(self) -> dict[str, Any]:
        return {"name": "validator", "address": "in-process", "allow": source_allowlist()}

    def perform(self, ctx: HandlerContext) -> dict[str, Any]:
        _before_effect(ctx)
        return attestation_judge(ctx, lambda url: _read_allowed(url, _timeout(ctx)))


class ReportPublishHandler(Handler):
    """Publish the exact attested report revision, deduplicated on the operation id."""

    name = "report.publish"
    implementation_fingerprint = FromCode("demo.destinations.publisher_client")

    def destination(self) -> dict[str, Any]:
        return {"name": "publisher", "address": settings.DESTINATIONS["publisher_url"]}

    def perform(self, ctx: HandlerContext) -> dict[str, Any]:
        report = ctx.arguments["report"]
        payload = report["payload"]
        _before_effect(ctx)
        return within_deadline(ctx, lambda: publish(
            str(ctx.destination["address"]), key=ctx.operation_id, report_id=report["id"],
            revision=report["revision"], digest=report["digest"], title=payload["title"],
            body=payload["body"], timeout=_timeout(ctx), permit=_permit(ctx)))

    def lookup(self, operation_id: str, snapshot: dict[str, Any]) -> LookupResult:
        try:
            found = publication_lookup(str(snapshot["destination"]["address"]), operation_id,
                                       timeout=5.0)
        except LookupFailedError as exc:
            return LookupResult("unknown", f"publisher lookup failed: {exc.reason}")
        if found is None:
            return LookupResult("absent", f"publisher has no publication with key "
                                          f"{operation_id}")
        return LookupResult("present", f"publisher holds publication {operation_id} "
                                       f"(report {found.get('report_id')} revision "
                                       f"{found.get('revision')})")


HANDLERS: dict[str, Handler] = {
    h.name: h for h in (EmailSendHandler(), PaymentsTransferHandler(), CrmLookupHandler(),
                        ResearchFetchHandler(), EvidenceAttestHandler(), ReportPublishHandler())
}
