"""How one notification is sent (docs/design.md#notifications): a webhook as a Standard Webhooks
POST (`{"type","timestamp","data"}`, signed with the secret of the agent's endpoint or of the
deployment's `NOTIFY_WEBHOOKS` / `AUDIT_CHECKPOINT_WEBHOOKS` entry) to the address checked once
(`dispatch.outbound`), and an approver's email through the SMTP server of `smtp_address`.

`send` is one attempt: it answers the receiver's status code (None for an email) or raises
`SendFailed`, `final` when nothing later could deliver it (no retry), bounded in time by
`NOTIFY_TIMEOUT_SECONDS`. It never touches the outbox's state: the outbox
(`dispatch.services.notifications.notification_deliver`) claims the row, calls `send` and records
the result, the attempt and the row's next state.
"""

from __future__ import annotations

import json
import math
import smtplib
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import formatdate
from urllib.parse import urlsplit

from django.conf import settings
from standardwebhooks.webhooks import Webhook

from dispatch import outbound
from dispatch.models import Notification

#: The event of a sealer's checkpoint posted to `AUDIT_CHECKPOINT_WEBHOOKS`, whose entries hold
#: its secrets.
CHECKPOINT_EVENT = "audit.checkpoint"


class SendFailed(Exception):
    """An attempt that did not deliver: the error recorded, the receiver's status code if it
    answered, and `final` when nothing later could deliver it."""

    def __init__(self, error: str, status: int | None = None, *, final: bool = False) -> None:
        super().__init__(error)
        self.status = status
        self.final = final  # nothing later could deliver it: no retry


def send(notification: Notification) -> int | None:
    """One attempt at `notification` (its `endpoint` loaded): the webhook receiver's 2xx status,
    None for an email the SMTP server took; `SendFailed` otherwise."""
    if notification.channel == Notification.Channel.EMAIL:
        _send_email(notification)
        return None
    return _send_webhook(notification)


def _webhook_secret(notification: Notification) -> str:
    if notification.endpoint is not None:
        if notification.endpoint.deleted_at is not None:
            raise SendFailed("the endpoint was deleted", final=True)
        return notification.endpoint.secret
    hooks, name = (settings.AUDIT_CHECKPOINT_WEBHOOKS, "AUDIT_CHECKPOINT_WEBHOOKS") \
        if notification.event == CHECKPOINT_EVENT else (settings.NOTIFY_WEBHOOKS, "NOTIFY_WEBHOOKS")
    for hook in hooks:
        if hook.get("url") == notification.recipient and hook.get("secret"):
            return str(hook["secret"])
    raise SendFailed(f"no {name} entry holds this URL any more", final=True)


def webhook_body(notification: Notification, at: datetime) -> str:
    """The JSON body: `{"type","timestamp","data"}`, the Standard Webhooks event shape."""
    return json.dumps({**notification.payload, "timestamp": at.isoformat()},
                      separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _send_webhook(notification: Notification) -> int:
    secret = _webhook_secret(notification)
    if urlsplit(notification.recipient).scheme not in ("http", "https"):
        raise SendFailed("the webhook URL is not http or https", final=True)
    try:
        # Resolved and checked once: the POST goes to the address checked here
        # (dispatch.outbound), and is answered where it was sent (no redirect is followed).
        target = outbound.resolve(notification.recipient,
                                  allow_private=settings.WEBHOOK_ALLOW_PRIVATE)
    except outbound.OutboundError as exc:
        raise SendFailed(exc.reason) from None
    at = datetime.now(UTC)  # the receiver checks the timestamp against its own clock
    body = webhook_body(notification, at)
    try:
        signature = Webhook(secret).sign(notification.id, at, body)
    except Exception:  # an unusable secret in NOTIFY_WEBHOOKS; never say what it was
        raise SendFailed("the webhook secret is not a Standard Webhooks key", final=True) from None
    try:
        answer = outbound.post(target, body=body.encode(), timeout=settings.NOTIFY_TIMEOUT_SECONDS,
                               headers={
            "content-type": "application/json", "user-agent": "exact-action-console",
            "webhook-id": notification.id, "webhook-timestamp": str(math.floor(at.timestamp())),
            "webhook-signature": signature})
    except outbound.OutboundError as exc:  # refused, unreachable, timed out
        raise SendFailed(exc.reason) from None
    if not 200 <= answer.status < 300:
        raise SendFailed(f"the receiver answered {answer.status}", answer.status)
    return answer.status


def smtp_address() -> tuple[str, int] | None:
    """Where approvers' email goes: `NOTIFY_SMTP`, else the demo's SMTP destination."""
    if settings.NOTIFY_SMTP:
        host, _, port = settings.NOTIFY_SMTP.rpartition(":")
        return host, int(port)
    destinations = getattr(settings, "DESTINATIONS", None)
    if isinstance(destinations, dict) and "smtp_port" in destinations:
        return str(destinations.get("smtp_host", "127.0.0.1")), int(destinations["smtp_port"])
    return None


def email_message(notification: Notification) -> EmailMessage:
    data = notification.payload["data"]
    message = EmailMessage()
    message["Message-ID"] = f"<{notification.id}@console>"
    message["Date"] = formatdate(usegmt=True)
    message["From"] = settings.NOTIFY_EMAIL_FROM
    message["To"] = notification.recipient
    message["Subject"] = f"Approval requested: {data['summary']}"[:250]
    message.set_content(
        f"An action waits for your approval:\n\n  {data['summary']}\n\n"
        f"Open it to see exactly what it does, then approve or deny:\n\n"
        f"  {data['approval_url']}\n\n"
        f"Operation: {data['operation']}\nApproval: {data['approval_id']}\n"
        f"Proposal: {data['proposal_id']}\nExpires: {data['expires_at']}\n")
    return message


def _send_email(notification: Notification) -> None:
    address = smtp_address()
    if address is None:
        raise SendFailed("no SMTP server is configured (NOTIFY_SMTP)", final=True)
    message = email_message(notification)
    try:
        with smtplib.SMTP(address[0], address[1], local_hostname="console.localhost",
                          timeout=settings.NOTIFY_TIMEOUT_SECONDS) as smtp:
            smtp.send_message(message)
    except smtplib.SMTPResponseException as exc:
        raise SendFailed(f"the SMTP server refused: {exc.smtp_code}", exc.smtp_code) from None
    except (OSError, smtplib.SMTPException) as exc:
        raise SendFailed(f"no answer: {type(exc).__name__}") from None
