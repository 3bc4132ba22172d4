"""Notifications (docs/design.md#notifications): webhooks in the Standard Webhooks format, verified
by a real receiver on loopback with the reference library; bounded retries with backoff; the
approvers' email in the real SMTP sink; and never a permit, a token or a secret in a body."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from demo.destinations.runner import list_all
from dispatch.models import Notification, Permit
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.notifications import notification_deliver, notifications_due
from dispatch.services.principals import human_create, token_issue
from dispatch.services.webhooks import webhook_register
from dispatch.services.worker import operation_execute
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.webhooks import Receiver, webhook_receiver

pytestmark = pytest.mark.django_db

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the Standard Webhooks spec's example key


def assert_nothing_secret(texts: list[str], world: World, *secrets: str) -> None:
    """No permit id, no bearer token, no webhook secret in anything delivered."""
    forbidden = [*secrets, world.owner_token,
                 *Permit.objects.values_list("id", flat=True)]
    for text in texts:
        assert "whsec_" not in text
        for value in forbidden:
            assert value not in text


def deliveries_verified(receiver: Receiver, secret: str) -> list[dict[str, Any]]:
    """Each delivery's body as the reference algorithm (`Webhook.verify`) accepts it."""
    return [Webhook(secret).verify(d.body, d.headers) for d in receiver.deliveries]


def test_an_approval_request_reaches_the_deployment_webhook_signed(
    world: World, settings: Any,
) -> None:
    with webhook_receiver("ok") as receiver:
        settings.NOTIFY_WEBHOOKS = [{"url": receiver.url, "secret": SECRET}]
        proposal = world.propose_transfer(amount="1250.00", memo="Invoice 7")
        (notification,) = Notification.objects.filter(proposal_id=proposal.id)
        assert notification_deliver(notification_id=notification.id, enqueue=False) \
            == "delivered"

        (delivery,) = receiver.deliveries
        (event,) = deliveries_verified(receiver, SECRET)
        assert delivery.headers["webhook-id"] == notification.id
        assert delivery.headers["content-type"] == "application/json"
        assert event["type"] == "approval.requested"
        assert event["data"] == {
            "approval_id": proposal.approval.id, "proposal_id": proposal.id,
            "operation": "payments.transfer", "state": "pending", "role": "operator",
            "quorum": 1, "expires_at": proposal.approval.expires_at.isoformat(),
            "summary": event["data"]["summary"],
            "approval_url": f"http://127.0.0.1:8000/console/approvals/{proposal.approval.id}/"}
        assert "1,250.00" in event["data"]["summary"]
        # A body signed under another key, or altered, is refused by the same algorithm.
        with pytest.raises(Exception, match="signature"):
            Webhook("whsec_" + "A" * 43 + "=").verify(delivery.body, delivery.headers)
        with pytest.raises(Exception, match="signature"):
            Webhook(SECRET).verify(delivery.body.replace(b'"pending"', b'"granted"'),
                                  delivery.headers)
        assert_nothing_secret([d.body.decode() for d in receiver.deliveries], world, SECRET)
    notification.refresh_from_db()
    assert (notification.state, notification.attempts) == ("delivered", 1)
    assert list(notification.attempt_log.values_list("number", "ok", "status_code")) == [
        (1, True, 204)]


def test_failing_twice_then_succeeding_is_one_accepted_delivery_after_retries(
    world: World, settings: Any,
) -> None:
    settings.NOTIFY_BACKOFF_SECONDS = 10.0
    with webhook_receiver("fail", "fail", "ok") as receiver:
        settings.NOTIFY_WEBHOOKS = [{"url": receiver.url, "secret": SECRET}]
        proposal = world.propose_transfer()
        (notification,) = Notification.objects.filter(proposal_id=proposal.id)
        start = notification.next_attempt_at
        assert notification_deliver(notification_id=notification.id, now=start,
                                    enqueue=False) == "pending"
        # Not due before its backoff: nothing is sent.
        assert notifications_due(now=start + timedelta(seconds=9), enqueue=False) == 0
        assert len(receiver.deliveries) == 1
        assert notifications_due(now=start + timedelta(seconds=11), enqueue=False) == 1
        # The second retry waits twice as long: 20 s after the second attempt.
        assert notifications_due(now=start + timedelta(seconds=30), enqueue=False) == 0
        assert notifications_due(now=start + timedelta(seconds=32), enqueue=False) == 1
        assert notifications_due(now=start + timedelta(hours=1), enqueue=False) == 0

        verified = deliveries_verified(receiver, SECRET)
        assert len(verified) == 3
        assert {d.headers["webhook-id"] for d in receiver.deliveries} == {notification.id}
        assert_nothing_secret([d.body.decode() for d in receiver.deliveries], world, SECRET)
    notification.refresh_from_db()
    assert (notification.state, notification.attempts) == ("delivered", 3)
    assert list(notification.attempt_log.order_by("number").values_list(
        "number", "ok", "status_code")) == [(1, False, 500), (2, False, 500), (3, True, 204)]
    assert notification.attempt_log.filter(ok=True).count() == 1


def test_a_receiver_that_never_answers_is_given_up_after_the_bound(
    world: World, settings: Any,
) -> None:
    settings.NOTIFY_MAX_ATTEMPTS = 3
    settings.NOTIFY_TIMEOUT_SECONDS = 0.3
    settings.NOTIFY_BACKOFF_SECONDS = 1.0
    with webhook_receiver("hang") as receiver:
        settings.NOTIFY_WEBHOOKS = [{"url": receiver.url, "secret": SECRET}]
        proposal = world.propose_transfer()
        (notification,) = Notification.objects.filter(proposal_id=proposal.id)
        later = notification.next_attempt_at
        for _ in range(6):
            notifications_due(now=later, enqueue=False)
            later += timedelta(minutes=5)
        assert len(receiver.deliveries) == 3
        assert_nothing_secret([d.body.decode() for d in receiver.deliveries], world, SECRET)
    notification.refresh_from_db()
    assert (notification.state, notification.attempts) == ("failed", 3)
    log = list(notification.attempt_log.order_by("number"))
    assert [(a.number, a.ok, a.status_code) for a in log] == [
        (1, False, None), (2, False, None), (3, False, None)]
    assert all("timed out" in a.error or "Timeout" in a.error for a in log), \
        [a.error for a in log]


def test_an_agent_hears_its_own_decision_and_outcome(live: World, settings: Any) -> None:
    with webhook_receiver("ok") as receiver:
        registered = webhook_register(principal=live.owner, url=receiver.url,
                                      events=["approval.granted", "operation.completed"],
                                      now=live.now)
        # Another agent's endpoint hears nothing of this agent's proposals.
        other = webhook_register(principal=live.outsider, url=receiver.url,
                                 events=["approval.granted", "operation.completed"],
                                 now=live.now)
        proposal, _ = live.approved_email()
        operation = proposal_dispatch(principal=live.owner, proposal_id=proposal.id,
                                      now=live.now, enqueue=False)
        assert operation_execute(operation_id=operation.id).state == "completed"
        rows = list(Notification.objects.filter(proposal_id=proposal.id).order_by("created_at",
                                                                                  "event"))
        assert [(n.event, n.endpoint_id) for n in rows] == [
            ("approval.granted", registered.endpoint.id),
            ("operation.completed", registered.endpoint.id)]
        for row in rows:
            assert notification_deliver(notification_id=row.id, enqueue=False) == "delivered"
        granted, completed = deliveries_verified(receiver, registered.secret)
        with pytest.raises(Exception, match="signature"):
            Webhook(other.secret).verify(receiver.deliveries[0].body,
                                         receiver.deliveries[0].headers)
        assert granted["data"] == {
            "approval_id": proposal.approval.id, "proposal_id": proposal.id,
            "operation": "email.send", "state": "granted", "summary": granted["data"]["summary"]}
        assert completed["data"]["operation_id"] == operation.id
        assert completed["data"]["state"] == "completed"
        assert "customer@example.com" in completed["data"]["summary"]
        assert_nothing_secret([d.body.decode() for d in receiver.deliveries], live,
                              registered.secret, other.secret)


def test_an_approver_is_emailed_the_link_to_the_approval_page(
    live: World, destinations: Destinations, settings: Any,
) -> None:
    settings.CONSOLE_PUBLIC_URL = "https://console.acme.example"
    users = get_user_model().objects
    users.filter(username="approver").update(email="approver@acme.example")
    users.filter(username="outsider-operator").update(email="op@globex.example")
    # The requester is never asked; a human without the role is not either.
    _, nobody_token = human_create(name="viewer", tenant="acme", role="none", password="pw",
                                   email="viewer@acme.example")
    human_token = token_issue(principal=live.approver)
    proposal = live.propose_transfer(amount="310.00")
    (notification,) = Notification.objects.filter(proposal_id=proposal.id)
    assert (notification.channel, notification.recipient) == ("email", "approver@acme.example")
    assert notification_deliver(notification_id=notification.id, enqueue=False) == "delivered"

    (email,) = list_all(destinations.directory)["email"]
    link = f"https://console.acme.example/console/approvals/{proposal.approval.id}/"
    assert email["to"] == ["approver@acme.example"]
    assert notification.id in str(email["message_id"])
    assert str(email["subject"]).startswith("Approval requested: ")
    assert link in str(email["body"])
    assert proposal.id in str(email["body"])
    assert_nothing_secret([json.dumps(email)], live, human_token, nobody_token)


def test_the_beat_sweep_leaves_a_fresh_row_to_its_own_task(
    world: World, settings: Any,
) -> None:
    from dispatch import tasks

    settings.CELERY_TASK_ALWAYS_EAGER = True  # the sweep's messages run in-process
    with webhook_receiver("ok") as receiver:
        settings.NOTIFY_WEBHOOKS = [{"url": receiver.url, "secret": SECRET}]
        proposal = world.propose_transfer()
        (notification,) = Notification.objects.filter(proposal_id=proposal.id)
        Notification.objects.filter(id=notification.id).update(
            created_at=timezone.now(), next_attempt_at=timezone.now())
        assert tasks.notifications_due() == 0  # its on-commit task is still to come
        Notification.objects.filter(id=notification.id).update(
            next_attempt_at=timezone.now() - tasks.SWEEP_GRACE - timedelta(seconds=1))
        assert tasks.notifications_due() == 1
        assert len(deliveries_verified(receiver, SECRET)) == 1
    notification.refresh_from_db()
    assert notification.state == "delivered"
