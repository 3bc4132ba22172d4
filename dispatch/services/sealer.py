"""The sealer (docs/audit-seal.md#sealing): the only writer of the audit chain.

Rule. A pass takes, per tenant, the events that have no seal yet and whose `at` is at least
`AUDIT_SEAL_LAG` seconds old, in `(at, id)` order, gives them the next seqs and appends one block
(at most `AUDIT_SEAL_BATCH` events) signed with the current key. Only committed rows are visible
to it, and the lag (longer than any write transaction) makes an event that commits late with an
earlier `at` still be in its time window; whatever happens, selection is by "has no seal", never
by a watermark, so an event that commits after a pass is sealed by the next one and none is ever
skipped. One pass per tenant at a time, under the named lease `audit-seal:<tenant>`: two beats
never fork a chain, and the audit write path takes no lock at all.

Head (docs/audit-seal.md#head). Before it seals, a pass holds the chain to its head: the
chain's last block must be the head row's (number and digest), and the chain must still hold the
block of the checkpoint log's last checkpoint, with its digest. Otherwise it seals nothing: what
it would sign next would make a removed or rewritten end of the chain look genuine. An event
older than the newest sealed one is never sealed (it is left out; the others are sealed). Either
way it alerts: the audit event `audit.head_mismatch` (once per distinct problem), the head row's
`mismatch` (what `console_audit_head_mismatch` counts) and an error in the log.

Publication (docs/audit-seal.md#checkpoints). A pass that appends a block writes its signed
checkpoint (the serving row, the webhooks' outbox rows) in the block's transaction, then appends
it to the checkpoint log. A log behind the head (a crash between the commit and the append, a
new log directory) is brought up to the head by the next pass.
"""
from __future__ import annotations

import hmac
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dispatch.models import AuditBlock, AuditCheckpoint, AuditEvent, AuditHead, AuditSeal, Tenant
from dispatch.services.audit import audit_record
from dispatch.services.checkpoints import (
    LogUnreadableError,
    checkpoint_view,
    log_append,
    log_latest,
)
from dispatch.services.leases import lease
from dispatch.services.notifications import notify_checkpoint
from dispatch.signing import current_key, signing_keys
from protocols.auditseal import (
    GENESIS,
    block_digest,
    checkpoint_problem,
    event_digest,
    merkle_root,
    sign_block,
    sign_checkpoint,
    verify_checkpoint_signature,
)

log = logging.getLogger(__name__)

#: The audit event of a refusal to seal.
HEAD_MISMATCH = "audit.head_mismatch"
#: At most this many ids of events too old to seal are named in an alert.
NAMED_EVENTS = 20


class _HeadMovedError(Exception):
    """The head row changed between the check and the write (never under the lease)."""


def rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_record(event: AuditEvent, seq: int) -> dict[str, Any]:
    """The event's sealed fields, as they are hashed and exported."""
    return {"id": event.pk, "tenant": event.tenant_id, "seq": seq, "at": rfc3339(event.at),
            "kind": event.kind, "actor": event.actor, "operation_id": event.operation_id,
            "proposal_id": event.proposal_id, "digest": event.digest, "details": event.details}


def block_record(block: AuditBlock) -> dict[str, Any]:
    return {"tenant": block.tenant_id, "block": block.number, "from_seq": block.from_seq,
            "to_seq": block.to_seq, "root": block.root, "prev": block.prev,
            "sealed_at": block.sealed_at, "signature": block.signature}


def digest_of(block: AuditBlock | None) -> str:
    """The block's digest; the genesis digest for no block."""
    return block_digest(block_record(block)) if block is not None else GENESIS


def seal_lag() -> timedelta:
    return timedelta(seconds=float(getattr(settings, "AUDIT_SEAL_LAG", 10)))


def seal_tenant(tenant_id: str, *, now: datetime | None = None) -> int:
    """Seal one batch of a tenant's ripe events; the number sealed (0 if busy, none, or refused
    because the chain is not at its head)."""
    now = now or timezone.now()
    with lease(f"audit-seal:{tenant_id}", ttl=60) as held:
        if not held:
            return 0
        last = AuditBlock.objects.filter(tenant_id=tenant_id).order_by("-number").first()
        logged, log_problem = _held_to_log(tenant_id, last)
        problem = log_problem or _held_to_head(tenant_id, last)
        if problem:
            _alert(tenant_id, problem)
            return 0
        _log_catch_up(tenant_id, last, logged)
        newest = _newest_sealed_at(tenant_id, last)
        unsealed = AuditEvent.objects.filter(tenant_id=tenant_id).exclude(
            id__in=AuditSeal.objects.filter(tenant_id=tenant_id).values("event_id"))
        stale = [] if newest is None else list(
            unsealed.filter(at__lt=newest).order_by("at", "id")
            .values_list("id", flat=True)[:NAMED_EVENTS + 1])
        if stale:
            _alert(tenant_id, "events older than the newest sealed one are left unsealed: "
                   + _named(stale), events=stale[:NAMED_EVENTS])
        else:
            _alert_over(tenant_id)
        ripe = unsealed.filter(at__lte=now - seal_lag())
        if newest is not None:
            ripe = ripe.filter(at__gte=newest)  # never an event older than the newest sealed
        batch = int(getattr(settings, "AUDIT_SEAL_BATCH", 1000))
        events = list(ripe.order_by("at", "id")[:batch])
        if not events:
            return 0
        return _seal(tenant_id, last, events)


def _named(ids: list[int]) -> str:
    named = ", ".join(f"event {i}" for i in ids[:NAMED_EVENTS])
    return named + (" and more" if len(ids) > NAMED_EVENTS else "")


def _held_to_head(tenant_id: str, last: AuditBlock | None) -> str | None:
    """What is wrong when the chain's last block is not the head row's; None when it is."""
    head = AuditHead.objects.filter(tenant_id=tenant_id).first()
    number, digest = (head.block, head.digest) if head is not None else (0, GENESIS)
    found = last.number if last is not None else 0
    if found != number:
        return f"the chain's last block is block {found}, its head is block {number} (blocks " \
               "removed, or added without the sealer)"
    if not hmac.compare_digest(digest_of(last).encode(), digest.encode()):
        return f"block {found}: its digest is not the head's (the block was rewritten)"
    return None


def _held_to_log(tenant_id: str,
                 last: AuditBlock | None) -> tuple[dict[str, Any] | None, str | None]:
    """The checkpoint log's last checkpoint and what is wrong with the chain against it: the
    chain must hold its block with its digest. (None, None) with no log to read."""
    try:
        logged = log_latest(tenant_id)
    except LogUnreadableError as exc:
        return None, f"the checkpoint log is unreadable ({exc})"
    except OSError as exc:  # the log's directory is not there to read: the head row decides
        log.warning("audit seal: checkpoint log of %s not readable: %s", tenant_id, exc)
        return None, None
    if logged is None:
        return None, None
    keys = {key.kid: key.public for key in signing_keys()}
    if not verify_checkpoint_signature(logged, keys) or logged["tenant"] != tenant_id:
        return None, "the checkpoint log's last line is not a checkpoint of this tenant " \
                     "signed by this deployment"
    number = logged["block"]
    block = last if last is not None and last.number == number else (
        AuditBlock.objects.filter(tenant_id=tenant_id, number=number).first()
        if last is not None and number < last.number else None)
    problem = checkpoint_problem(logged, digest_of(block) if block is not None else None)
    return logged, (f"checkpoint log: {problem}" if problem else None)


def _log_catch_up(tenant_id: str, last: AuditBlock | None,
                  logged: dict[str, Any] | None) -> None:
    """Append the head's checkpoint to a log that is behind it (or not there)."""
    if last is None or (logged is not None and logged["block"] == last.number):
        return
    row = AuditCheckpoint.objects.filter(tenant_id=tenant_id, block=last.number).first()
    if row is None:  # a block sealed before checkpoints existed
        key = current_key()
        checkpoint = sign_checkpoint(tenant=tenant_id, block=last.number, digest=digest_of(last),
                                     sealed_at=last.sealed_at, kid=key.kid, key=key.private)
        row = _checkpoint_row(checkpoint)
    _publish(checkpoint_view(row))


def _newest_sealed_at(tenant_id: str, last: AuditBlock | None) -> datetime | None:
    if last is None:
        return None
    seal = AuditSeal.objects.filter(tenant_id=tenant_id, seq=last.to_seq).first()
    event = AuditEvent.objects.filter(pk=seal.event_id).first() if seal is not None else None
    if event is not None:
        return event.at
    # The newest sealed event is gone (audit_verify names it): the signed time still bounds it.
    return datetime.fromisoformat(last.sealed_at) - seal_lag()


def _alert(tenant_id: str, problem: str, *, events: list[int] | None = None) -> None:
    """Record a refusal: once per distinct problem, as the audit event and the head row's
    `mismatch` (made, at block 0, when the row itself was removed)."""
    with transaction.atomic():
        head = AuditHead.objects.select_for_update().filter(tenant_id=tenant_id).first()
        if head is not None and head.mismatch == problem:
            return
        if head is None:
            AuditHead.objects.create(tenant_id=tenant_id, block=0, digest=GENESIS,
                                     mismatch=problem)
        else:
            AuditHead.objects.filter(tenant_id=tenant_id).update(mismatch=problem)
        details: dict[str, Any] = {"problem": problem}
        if events is not None:
            details["events"] = events
        audit_record(tenant_id=tenant_id, kind=HEAD_MISMATCH, actor="sealer",
                     at=timezone.now(), details=details)
    log.error("audit seal: tenant %s: %s", tenant_id, problem)


def _alert_over(tenant_id: str) -> None:
    AuditHead.objects.filter(tenant_id=tenant_id).exclude(mismatch="").update(mismatch="")


def _seal(tenant_id: str, last: AuditBlock | None, events: list[AuditEvent]) -> int:
    number = last.number + 1 if last else 1
    first_seq = last.to_seq + 1 if last else 1
    digests = [event_digest(event_record(e, first_seq + i)) for i, e in enumerate(events)]
    record: dict[str, Any] = {
        "tenant": tenant_id, "block": number, "from_seq": first_seq,
        "to_seq": first_seq + len(events) - 1, "root": merkle_root(digests),
        "prev": digest_of(last), "sealed_at": rfc3339(timezone.now())}
    key = current_key()
    record["signature"] = sign_block(record, key.kid, key.private)
    digest = block_digest(record)
    checkpoint = sign_checkpoint(tenant=tenant_id, block=number, digest=digest,
                                 sealed_at=record["sealed_at"], kid=key.kid, key=key.private)
    try:
        with transaction.atomic():
            AuditBlock.objects.create(
                tenant_id=tenant_id, number=number, from_seq=record["from_seq"],
                to_seq=record["to_seq"], root=record["root"], prev=record["prev"],
                sealed_at=record["sealed_at"], signature=record["signature"])
            AuditSeal.objects.bulk_create([
                AuditSeal(event_id=e.pk, tenant_id=tenant_id, seq=first_seq + i, block=number,
                          digest=digests[i]) for i, e in enumerate(events)])
            _advance_head(tenant_id, last, number, digest)
            _checkpoint_row(checkpoint)
            notify_checkpoint(tenant_id, checkpoint, timezone.now())
    except _HeadMovedError:
        _alert(tenant_id, "the head row changed while the sealer held the tenant's lease")
        return 0
    _publish(checkpoint)
    return len(events)


def _advance_head(tenant_id: str, last: AuditBlock | None, number: int, digest: str) -> None:
    """Move the head from `last` to block `number`: a conditional UPDATE, the backstop of the
    lease (a head that moved meanwhile rolls the block back)."""
    moved = AuditHead.objects.filter(
        tenant_id=tenant_id, block=last.number if last is not None else 0,
        digest=digest_of(last)).update(block=number, digest=digest)
    if moved == 1:
        return
    if last is None and not AuditHead.objects.filter(tenant_id=tenant_id).exists():
        AuditHead.objects.create(tenant_id=tenant_id, block=number, digest=digest)
        return
    raise _HeadMovedError(tenant_id)


def _checkpoint_row(checkpoint: dict[str, Any]) -> AuditCheckpoint:
    return AuditCheckpoint.objects.create(
        tenant_id=checkpoint["tenant"], block=checkpoint["block"], digest=checkpoint["digest"],
        sealed_at=checkpoint["sealed_at"], kid=checkpoint["kid"],
        signature=checkpoint["signature"])


def _publish(checkpoint: dict[str, Any]) -> None:
    """Append to the checkpoint log; a failure is logged, and the next pass appends the head."""
    try:
        log_append(checkpoint)
    except OSError:
        log.exception("audit seal: could not append to the checkpoint log of %s",
                      checkpoint["tenant"])


def _watched_tenants() -> set[str]:
    """Tenants whose head is checked every pass, new events or not: those with a head row or a
    checkpoint log."""
    logs = {path.stem for path in Path(settings.AUDIT_CHECKPOINT_DIR).glob("*.jsonl")}
    return set(AuditHead.objects.values_list("tenant_id", flat=True)) | set(
        Tenant.objects.filter(id__in=logs).values_list("id", flat=True))


def seal_all(*, now: datetime | None = None) -> int:
    """One pass over every tenant with ripe unsealed events (and a check of every watched
    tenant's head), until none is left."""
    now = now or timezone.now()
    total = 0
    watched = _watched_tenants()
    while True:
        sealed = AuditSeal.objects.values("event_id")
        tenants = set(AuditEvent.objects.filter(at__lte=now - seal_lag())
                      .exclude(id__in=sealed).values_list("tenant_id", flat=True).distinct())
        done = sum(seal_tenant(t, now=now) for t in sorted(tenants | watched))
        watched = set()
        total += done
        if not done:
            return total
