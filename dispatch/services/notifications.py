"""Notifications to approvers and agents (docs/design.md#notifications): the outbox, the one
writer of its rows and of their delivery attempts (agents' endpoints: `dispatch.services.webhooks`;
how one notification is sent, the signed webhook POST and the SMTP email: `dispatch.transports`).

Enqueue: the move that a notification tells of (an approval opened, decided or expired; an
operation's outcome) writes the outbox rows in its own transaction (`notify_*`), so a rolled-back
move tells nothing and a committed one is never lost; the delivery task is enqueued when that
transaction commits, and the beat sweep (`notifications_due`) picks up any row whose task never
ran (a process killed between the commit and the send).

Delivery (`notification_deliver`): one conditional UPDATE claims a due row for one worker, for
`NOTIFY_CLAIM_SECONDS`; the send follows (`dispatch.transports.send`, which answers or raises
and writes nothing), then its attempt is recorded, with bounded retries (`NOTIFY_MAX_ATTEMPTS`)
and exponential backoff (`NOTIFY_BACKOFF_SECONDS`). A worker that dies between claim and record
leaves the row claimed until its claim lapses; the receiver may then hear it twice under the same
`webhook-id` (the email's Message-ID), its idempotency key.

What a notification carries: ids, the state, the action's one-sentence summary and, for an
approver, the link to the approval page. Never the permit, a token or a secret.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, cast

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from dispatch.failpoints import failpoint
from dispatch.models import (
    ApprovalRequest,
    Notification,
    NotificationAttempt,
    Operation,
    Proposal,
    WebhookEndpoint,
)
from dispatch.presentation import summarize
from dispatch.queue import notify_later, notify_on_commit
from dispatch.runtime import get_runtime
from dispatch.services.webhooks import AGENT_EVENTS
from dispatch.store import notifications as store
from dispatch.transports import CHECKPOINT_EVENT, SendFailed, send, smtp_address
from protocols.jsontypes import JSONObject
from protocols.outcomes import Notice

log = logging.getLogger(__name__)

#: The operation states an outcome notification tells of.
OUTCOME_STATES = frozenset(event.removeprefix("operation.") for event in AGENT_EVENTS
                           if event.startswith("operation."))
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


# --- enqueue: in the transaction of the move -------------------------------------------------


def notify_approval_requested(approval: ApprovalRequest, proposal: Proposal,
                              now: datetime) -> None:
    """Inside `approval_open`'s transaction: an email to each eligible approver with an
    address (humans of the tenant holding the role, or admin, never the requester), a message
    to each deployment webhook, and to the requesting agent's endpoints that asked."""
    # Read only where there is somewhere to send them.
    emails = store.approver_emails(tenant_id=proposal.tenant_id, role=approval.role,
                                   requester_id=proposal.principal_id) if smtp_address() else []
    hooks = [str(hook["url"]) for hook in settings.NOTIFY_WEBHOOKS]
    endpoints = store.endpoints(principal_id=proposal.principal_id, event="approval.requested")
    if not emails and not hooks and not endpoints:
        return
    data: JSONObject = {
        "approval_id": approval.id, "proposal_id": proposal.id,
        "operation": proposal.operation, "summary": proposal_summary(proposal),
        "state": approval.state,
        "role": approval.role, "quorum": approval.quorum,
        "expires_at": approval.expires_at.isoformat(), "approval_url": approval_url(approval.id)}
    outbox = [_row(proposal, "approval.requested", data, now,
                   channel=Notification.Channel.EMAIL, recipient=email) for email in emails]
    outbox += [_row(proposal, "approval.requested", data, now, recipient=url) for url in hooks]
    outbox += [_row(proposal, "approval.requested", data, now, endpoint=e) for e in endpoints]
    _write(outbox)


def notify_approval_decided(approval: ApprovalRequest, proposal: Proposal,
                            now: datetime) -> None:
    """Inside `approval_move`'s transaction: the agent's endpoints hear the approval's new
    state (granted, denied, expired). Never the permit: the agent reads it from its proposal."""
    event = f"approval.{approval.state}"
    endpoints = store.endpoints(principal_id=proposal.principal_id, event=event)
    if not endpoints:
        return
    data: JSONObject = {"approval_id": approval.id, "proposal_id": proposal.id,
                        "operation": proposal.operation, "summary": proposal_summary(proposal),
                        "state": approval.state}
    _write([_row(proposal, event, data, now, endpoint=e) for e in endpoints])


def outcome_hearer(proposal: Proposal, state: str) -> str | None:
    """For `operation_move`'s plan: the proposing agent, whom its move's statement asks
    whether it holds a webhook endpoint; None, and nothing asked, for a state no agent hears
    of."""
    return proposal.principal_id if state in OUTCOME_STATES else None


def outcome_write(operation: Operation, notice: Notice, now: datetime) -> None:
    """Inside `operation_move`'s transaction, once its move answered that the agent holds an
    endpoint: one outbox row (`Notice.rows`) per endpoint of the agent's that takes the event;
    their delivery is enqueued on commit."""
    endpoints = store.endpoints(principal_id=notice.hearer, event=notice.event)
    if not endpoints:
        return
    proposal = operation.proposal
    _write([_row(proposal, row.event, row.data, now,
                 endpoint=cast(WebhookEndpoint, row.endpoint))  # as `store.endpoints` gave it
            for row in notice.rows(endpoints, proposal_summary(proposal))])


def notify_checkpoint(tenant_id: str, checkpoint: JSONObject, now: datetime) -> None:
    """Inside the sealing transaction: the signed checkpoint (docs/audit-seal.md#witness) to each
    of `AUDIT_CHECKPOINT_WEBHOOKS`, delivered like any webhook, so a receiver that fails is
    retried and never holds the sealer up."""
    _write([Notification(
        tenant_id=tenant_id, event=CHECKPOINT_EVENT, channel=Notification.Channel.WEBHOOK,
        recipient=str(hook["url"]), proposal_id="",
        payload={"type": CHECKPOINT_EVENT, "data": checkpoint}, next_attempt_at=now,
        created_at=now) for hook in settings.AUDIT_CHECKPOINT_WEBHOOKS])


def _write(rows: list[Notification]) -> None:
    if not rows:
        return
    Notification.objects.bulk_create(rows)
    notify_on_commit([row.id for row in rows])


def _row(proposal: Proposal, event: str, data: JSONObject, now: datetime, *,
         channel: str = Notification.Channel.WEBHOOK, recipient: str = "",
         endpoint: WebhookEndpoint | None = None) -> Notification:
    return Notification(
        tenant_id=proposal.tenant_id, event=event, channel=channel,
        recipient=endpoint.url if endpoint is not None else recipient, endpoint=endpoint,
        proposal_id=proposal.id, payload={"type": event, "data": data},
        next_attempt_at=now, created_at=now)


def proposal_summary(proposal: Proposal) -> str:
    """The action's sentence, as on the approval page, on one line: what webhooks, emails and
    the approvals list (docs/rest-api.md#admin) say of a proposal."""
    runtime = get_runtime()
    contract = runtime.registry.by_fingerprint(proposal.contract_fingerprint)
    summarizer = None if contract is None else runtime.summaries.get(
        (contract.qualified_name, contract.contract_version))
    snapshot = json.loads(proposal.canonical)
    arguments = snapshot.get("arguments", {}) if isinstance(snapshot, dict) else {}
    text = summarize(summarizer, proposal.operation, arguments).text
    return _CONTROL.sub(" ", text).strip()[:300]


#: The console's address when `CONSOLE_PUBLIC_URL` is not set (the embedded default's).
LOCAL_CONSOLE = "http://127.0.0.1:8000"


def console_url(path: str = "/console/") -> str:
    """`path` at the console's public address (`CONSOLE_PUBLIC_URL`, else the local one)."""
    return (settings.CONSOLE_PUBLIC_URL or LOCAL_CONSOLE).rstrip("/") + path


def approval_url(approval_id: str) -> str:
    """The approval's page at the console's public address."""
    return console_url(f"/console/approvals/{approval_id}/")


def public_approval_url(approval_id: str) -> str | None:
    """The approval's page at `CONSOLE_PUBLIC_URL`, or None when the deployment has not set
    it: the REST API then leaves the link to the client, which knows the address it used."""
    return approval_url(approval_id) if settings.CONSOLE_PUBLIC_URL else None


# --- delivery ----------------------------------------------------------------------------------


def notification_deliver(*, notification_id: str, now: datetime | None = None,
                         enqueue: bool = True) -> str | None:
    """Claim one due notification, send it, record the attempt; the state it is left in, or
    None when it was not due or another worker holds it. A failed attempt is retried after the
    backoff (a task with a countdown when `enqueue`, and the beat sweep in any case) until
    `NOTIFY_MAX_ATTEMPTS`."""
    def clock() -> datetime:
        return now if now is not None else timezone.now()

    claimed = _claim(notification_id, clock())
    if claimed is None:
        return None
    notification, number = claimed
    failpoint("notify.before_send")
    try:
        status = send(notification)
    except SendFailed as failed:
        return _settle(notification, number, clock(), status=failed.status, error=str(failed),
                       final=failed.final, enqueue=enqueue)
    except Exception as exc:  # a bug must not leave the row claimed: record it, retry later
        log.exception("notification %s failed unexpectedly", notification.id)
        return _settle(notification, number, clock(), status=None,
                       error=type(exc).__name__, final=False, enqueue=enqueue)
    return _settle(notification, number, clock(), status=status, error="", final=False,
                   enqueue=enqueue, ok=True)


def _due(now: datetime) -> Q:
    return (Q(state=Notification.State.PENDING, next_attempt_at__lte=now)
            | Q(state=Notification.State.SENDING, claimed_until__lte=now))


class NotificationEvent(StrEnum):
    CLAIM = "claim"      # a worker takes a due row (pending, or sending past a dead claim)
    DELIVER = "deliver"  # the receiver accepted it
    RETRY = "retry"      # an attempt failed; another is due after the backoff
    FAIL = "fail"        # the last attempt failed, or nothing could ever deliver it


#: The transition table: the states each event moves a notification from, and to.
NOTIFICATION_MOVES: dict[NotificationEvent, tuple[frozenset[str], str]] = {
    NotificationEvent.CLAIM: (frozenset({Notification.State.PENDING, Notification.State.SENDING}),
                              Notification.State.SENDING),
    NotificationEvent.DELIVER: (frozenset({Notification.State.SENDING}),
                                Notification.State.DELIVERED),
    NotificationEvent.RETRY: (frozenset({Notification.State.SENDING}),
                              Notification.State.PENDING),
    NotificationEvent.FAIL: (frozenset({Notification.State.SENDING}), Notification.State.FAILED),
}


def notification_move(notification: Notification, event: NotificationEvent, *, now: datetime,
                      actor: str, retry_at: datetime | None = None) -> bool:
    """THE one owner of a notification's state: one conditional UPDATE that holds only while
    the row is as loaded (its state among the event's sources, its attempt count unchanged).
    A claim takes a due row (`_due`) for `NOTIFY_CLAIM_SECONDS` and counts an attempt; every
    other move settles the claimed attempt, and a retry is due again at `retry_at`. Returns
    whether it moved; the caller's `notification` is updated when it did."""
    sources, target = NOTIFICATION_MOVES[event]
    rows = Notification.objects.filter(id=notification.id, attempts=notification.attempts,
                                       state__in=sources)
    if event is NotificationEvent.CLAIM:
        claimed_until: datetime | None = now + timedelta(seconds=settings.NOTIFY_CLAIM_SECONDS)
        moved = rows.filter(_due(now)).update(state=target, attempts=F("attempts") + 1,
                                              claimed_until=claimed_until)
        attempts = notification.attempts + 1
    else:
        claimed_until, attempts = None, notification.attempts
        changes: dict[str, Any] = (
            {"delivered_at": now} if event is NotificationEvent.DELIVER else
            {"next_attempt_at": retry_at or now} if event is NotificationEvent.RETRY else {})
        moved = rows.update(state=target, claimed_until=None, **changes)
        for name, value in changes.items():
            setattr(notification, name, value)
    if moved != 1:
        return False
    log.debug("notification %s: %s by %s", notification.id, event.value, actor)
    notification.state, notification.attempts = target, attempts
    notification.claimed_until = claimed_until
    return True


def _claim(notification_id: str, now: datetime) -> tuple[Notification, int] | None:
    """Give a due row to one worker (`notification_move`'s conditional UPDATE: of two, one
    moves it), with its attempt opened."""
    with transaction.atomic():
        notification = Notification.objects.select_related("endpoint").filter(
            _due(now), id=notification_id).first()
        if notification is None:
            return None
        lapsed = NotificationAttempt.objects.filter(notification_id=notification_id,
                                                    ended_at=None)
        if notification.attempts >= settings.NOTIFY_MAX_ATTEMPTS:
            # The last attempt's worker died: that was the last try.
            if notification_move(notification, NotificationEvent.FAIL, now=now,
                                 actor="sweep"):
                lapsed.update(ended_at=now, error="the worker stopped before it answered")
            return None
        if not notification_move(notification, NotificationEvent.CLAIM, now=now,
                                 actor="worker"):
            return None
        lapsed.update(ended_at=now, error="the worker stopped before it answered")
        NotificationAttempt.objects.create(notification_id=notification_id,
                                           number=notification.attempts, started_at=now)
    return notification, notification.attempts


def _settle(notification: Notification, number: int, now: datetime, *, status: int | None,
            error: str, final: bool, enqueue: bool, ok: bool = False) -> str | None:
    """Record attempt `number`'s answer and the row's next state, if the claim still holds."""
    delay = settings.NOTIFY_BACKOFF_SECONDS * 2 ** (number - 1)
    event = (NotificationEvent.DELIVER if ok else
             NotificationEvent.FAIL if final or number >= settings.NOTIFY_MAX_ATTEMPTS else
             NotificationEvent.RETRY)
    with transaction.atomic():
        if not notification_move(notification, event, now=now, actor="worker",
                                 retry_at=now + timedelta(seconds=delay)):
            return None  # its claim lapsed and another worker took it over
        NotificationAttempt.objects.filter(notification_id=notification.id, number=number,
                                           ended_at=None).update(
            ended_at=now, ok=ok, status_code=status, error=error[:500])
        if event is NotificationEvent.RETRY and enqueue:
            notify_later(notification.id, delay)
    return notification.state


def notifications_due(*, now: datetime, enqueue: bool = True, limit: int = 200) -> int:
    """The beat sweep: every due row (a retry's time came, a worker's claim lapsed, a task
    that was never run) is enqueued, or delivered here when not `enqueue`. Idempotent: the
    claim decides who sends."""
    due = list(Notification.objects.filter(_due(now)).order_by("next_attempt_at")
               .values_list("id", flat=True)[:limit])
    for notification_id in due:
        if enqueue:
            notify_later(notification_id, 0)
        else:
            notification_deliver(notification_id=notification_id, now=now, enqueue=False)
    return len(due)
