"""Notifications (docs/design.md#notifications): the outbox of messages to approvers and agents,
its delivery attempts, and the webhook endpoints agents register. Written only by
`dispatch.services.notifications`.

An outbox row is written in the transaction of the move it tells of (an approval opened or
decided, an operation's outcome), so a rolled-back move tells nothing and a committed one is
never lost; a delivery task claims the row with a conditional UPDATE before it sends.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from dispatch.models.base import Principal, Tenant, _id_field


class WebhookEndpoint(models.Model):
    """An agent's webhook for its own proposals' decisions and outcomes (`POST webhooks/`).

    `secret` is the Standard Webhooks signing key (`whsec_…`): kept in clear because signing
    needs it, shown once in the answer that creates the endpoint, never again, never logged."""

    id = _id_field("whk")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    principal = models.ForeignKey(Principal, on_delete=models.PROTECT, related_name="+")
    url = models.CharField(max_length=2000)
    events = models.JSONField()
    secret = models.CharField(max_length=100)
    created_at = models.DateTimeField()
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["principal", "deleted_at"], name="webhook_principal")]


class Notification(models.Model):
    """One message to one recipient, the outbox row of its delivery. `id` is the webhook-id
    (and the email's Message-ID): a receiver deduplicates on it.

    `state`: `pending` (due at `next_attempt_at`), `sending` (claimed by a worker until
    `claimed_until`: past it, a worker that died holds it no longer), `delivered`, `failed`
    (every attempt of `NOTIFY_MAX_ATTEMPTS` failed, or it can no longer be sent)."""

    class Channel(models.TextChoices):
        EMAIL = "email", "email"
        WEBHOOK = "webhook", "webhook"

    class State(models.TextChoices):
        PENDING = "pending", "pending"
        SENDING = "sending", "sending"
        DELIVERED = "delivered", "delivered"
        FAILED = "failed", "failed"

    id = _id_field("msg")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    event = models.CharField(max_length=40)
    channel = models.CharField(max_length=10, choices=Channel.choices)
    # The email address, or the webhook's URL; an agent's endpoint is named too (its secret).
    recipient = models.CharField(max_length=2000)
    endpoint = models.ForeignKey(WebhookEndpoint, null=True, blank=True,
                                 on_delete=models.PROTECT, related_name="notifications")
    proposal_id = models.CharField(max_length=40)
    payload = models.JSONField()  # ids and a summary: never a permit, a token or a secret
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["state", "next_attempt_at"], name="notification_due"),
            models.Index(fields=["tenant", "-created_at", "-id"], name="notification_log"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=["pending", "sending", "delivered", "failed"]),
                name="notification_state_valid"),
        ]


class NotificationAttempt(models.Model):
    """One try at delivering a notification: opened when a worker claims it, ended with what
    the receiver answered (`status_code` for a webhook) or the error. One left open was the
    try of a worker that died before it could say."""

    id = _id_field("nat")
    notification = models.ForeignKey(Notification, on_delete=models.CASCADE,
                                     related_name="attempt_log")
    number = models.PositiveSmallIntegerField()
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    ok = models.BooleanField(default=False)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["notification", "number"],
                                    name="one_notification_attempt_per_number"),
        ]
