"""Audit events, appended in the caller's transaction, secrets redacted (docs/design.md#audit), and
the replay that checks them (docs/design.md#dispatcher).

An append is one fixed INSERT (`dispatch.store.audit`: no model instance, no query
compilation): it rides in every write transaction of the hot path, so it costs what the
database costs. `audit_values` gives a store statement the same row to write beside its own (a
PostgreSQL CTE).
`audit_binding` is what every event of an operation carries so that it stands alone,
`protocols.audit_kinds.audit_moves` what an event carries of the resource moves its
transaction made, and
`audit_text` masks the action's values in what a destination or an admin wrote: the audit
references the stored snapshot by id and digest and never holds a payload (docs/design.md#audit).
`audit_replay` streams the audit in append order through `protocols.trace`.
"""

from __future__ import annotations

import json
from datetime import datetime

from django.conf import settings

from dispatch.models import AuditEvent, Proposal, Tenant
from dispatch.store import audit
from dispatch.store.audit import AuditRow
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject
from protocols.redaction import mask_values, redact, string_values
from protocols.trace import TraceChecker
from protocols.trace_events import TraceEvent, TraceReport


def audit_values(
    *, tenant_id: str, kind: str, actor: str, at: datetime, operation_id: str = "",
    proposal_id: str = "", digest: str = "", details: JSONObject | None = None,
) -> AuditRow:
    """One event's row, prepared for the database, secrets redacted: for a store statement
    that writes it beside its own (`dispatch.store.audit`)."""
    return audit.row(tenant_id=tenant_id, kind=kind, actor=actor, at=at,
                     operation_id=operation_id, proposal_id=proposal_id, digest=digest,
                     details=redact(details or {}, settings.AUDIT_REDACT_FIELDS))


def audit_record(
    *,
    tenant_id: str,
    kind: str,
    actor: str,
    at: datetime,
    operation_id: str = "",
    proposal_id: str = "",
    digest: str = "",
    details: JSONObject | None = None,
) -> None:
    """Append one event. Call inside the transaction of the change it records."""
    audit.append(audit_values(tenant_id=tenant_id, kind=kind, actor=actor, at=at,
                              operation_id=operation_id, proposal_id=proposal_id,
                              digest=digest, details=details))


def audit_binding(proposal: Proposal) -> JSONObject:
    """What the events of a proposal's action carry (docs/design.md#audit), from the row already
    loaded: the contract and policy fingerprints, the execution id, and the id and revision of each
    resource it acts on. References and digests only; the snapshot stays in its own row."""
    return {"contract_fingerprint": proposal.contract_fingerprint,
            "policy_fingerprint": proposal.policy_fingerprint,
            "execution_id": proposal.execution_id,
            "resources": [{"id": ref["id"], "revision": ref["revision"]}
                          for ref in proposal.resource_refs]}


def audit_text(proposal: Proposal, text: str) -> str:
    """`text` (a destination's error, a lookup's evidence, an admin's note) with every value
    of the proposal's arguments, resources' payloads included, masked: a handler may quote
    what it was sent, the audit must not. Only texts pay for it; the hot path has none."""
    if not text:
        return text
    return mask_values(text, string_values(json.loads(proposal.canonical)["arguments"]))


def audit_replay(*, tenant: str | None = None) -> TraceReport:
    """Replay the audit (of the tenant named `tenant`, or of all) through the transition
    tables: every violation of the trace safety property (docs/design.md#dispatcher), in append
    order.

    One query, read in id order in chunks (a server-side cursor on PostgreSQL), so the audit
    never has to fit in memory; the replay keeps one small record per operation and permit.
    """
    events = AuditEvent.objects.all()
    if tenant is not None:
        tenant_id = Tenant.objects.filter(name=tenant).values_list("id", flat=True).first()
        if tenant_id is None:
            raise Denial(DenialCode.NOT_FOUND, f"No tenant named {tenant!r}.", kind="tenant")
        events = events.filter(tenant_id=tenant_id)
    checker = TraceChecker()
    rows = events.order_by("id").values_list("id", "kind", "operation_id", "proposal_id",
                                             "details")
    for event_id, kind, operation_id, proposal_id, details in rows.iterator(chunk_size=2000):
        checker.feed(TraceEvent(id=event_id, kind=kind, operation_id=operation_id,
                                proposal_id=proposal_id, details=details or {}))
    return checker.report()
