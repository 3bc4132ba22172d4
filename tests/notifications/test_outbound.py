"""Outbound requests connect to the address that was checked (docs/design.md#notifications): a
webhook's host is resolved once, every address it answers is checked, and the request goes to
one of those addresses, never to what a second lookup would answer (DNS rebinding). Over TLS the
server name and the certificate are still the URL's hostname."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dispatch.models import Notification
from dispatch.outbound import OutboundError, post, resolve
from dispatch.services.notifications import notification_deliver
from tests.conftest import World
from tests.support.outbound import PUBLIC, authority, refuse_outside, scripted_resolver
from tests.support.webhooks import webhook_receiver

pytestmark = pytest.mark.django_db

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
NAME = "hooks.rebind.test"


def named(url: str, name: str = NAME) -> str:
    """The receiver's URL with its loopback address replaced by `name`."""
    return url.replace("127.0.0.1", name)


def test_a_name_rebound_to_loopback_after_the_check_is_never_posted_to(
    world: World, settings: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE = False  # production's setting
    settings.NOTIFY_TIMEOUT_SECONDS = 1.0
    with webhook_receiver("ok") as receiver:
        settings.NOTIFY_WEBHOOKS = [{"url": named(receiver.url), "secret": SECRET}]
        proposal = world.propose_transfer()
        (notification,) = Notification.objects.filter(proposal_id=proposal.id)
        # A public address to the first lookup, loopback to every later one.
        with scripted_resolver(monkeypatch, NAME, PUBLIC, "127.0.0.1") as resolver, \
                refuse_outside(monkeypatch) as tried:
            notification_deliver(notification_id=notification.id, enqueue=False)
        assert receiver.deliveries == []
        assert resolver.asked == [PUBLIC]  # one lookup, the checked one
        assert tried == [PUBLIC]  # the connection went to the checked address (stopped here)


def test_a_name_answering_loopback_is_refused_before_any_connection(
    world: World, settings: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE = False
    with webhook_receiver("ok") as receiver:
        settings.NOTIFY_WEBHOOKS = [{"url": named(receiver.url), "secret": SECRET}]
        proposal = world.propose_transfer()
        (notification,) = Notification.objects.filter(proposal_id=proposal.id)
        with scripted_resolver(monkeypatch, NAME, "127.0.0.1"):
            assert notification_deliver(notification_id=notification.id,
                                        enqueue=False) == "pending"
        assert receiver.deliveries == []
    (attempt,) = notification.attempt_log.all()
    assert not attempt.ok
    assert "is not a public address" in attempt.error


def test_where_private_addresses_are_allowed_a_name_is_delivered_to_its_one_answer(
    world: World, settings: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE = True  # the test settings' default
    with webhook_receiver("ok") as receiver:
        settings.NOTIFY_WEBHOOKS = [{"url": named(receiver.url), "secret": SECRET}]
        proposal = world.propose_transfer()
        (notification,) = Notification.objects.filter(proposal_id=proposal.id)
        with scripted_resolver(monkeypatch, NAME, "127.0.0.1", PUBLIC) as resolver, \
                refuse_outside(monkeypatch):
            assert notification_deliver(notification_id=notification.id,
                                        enqueue=False) == "delivered"
        (delivery,) = receiver.deliveries
        port = receiver.url.split(":")[2].split("/")[0]
        assert delivery.headers["host"] == f"{NAME}:{port}"
        assert resolver.asked == ["127.0.0.1"]


def test_every_address_a_name_answers_is_checked() -> None:
    with pytest.raises(OutboundError, match="not a public address"):
        resolve("http://localhost:9/x", allow_private=False)
    for url in ("ftp://example.com/", "http://user:pw@example.com/", "http://[::1/"):
        with pytest.raises(OutboundError):
            resolve(url, allow_private=True)


def test_over_tls_the_hostname_is_verified_while_the_checked_address_is_connected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    ca = authority()
    with webhook_receiver("ok", tls=ca.server_context(NAME, tmp_path)) as receiver, \
            scripted_resolver(monkeypatch, NAME, "127.0.0.1", PUBLIC) as resolver, \
            refuse_outside(monkeypatch):
        target = resolve(named(receiver.url), allow_private=True)
        answer = post(target, body=b"{}", headers={"content-type": "application/json"},
                      timeout=5, ssl_context=ca.client_context())
        assert answer.status == 204
        (delivery,) = receiver.deliveries
        port = receiver.url.split(":")[2].split("/")[0]
        assert delivery.headers["host"] == f"{NAME}:{port}"
        assert receiver.server_names == [NAME]  # SNI: the hostname, not the address
        assert resolver.asked == ["127.0.0.1"]


def test_over_tls_a_certificate_for_another_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    ca = authority()
    with webhook_receiver("ok", tls=ca.server_context("other.rebind.test", tmp_path)) \
            as receiver, scripted_resolver(monkeypatch, NAME, "127.0.0.1"):
        target = resolve(named(receiver.url), allow_private=True)
        with pytest.raises(OutboundError, match=r"CERTIFICATE_VERIFY_FAILED|hostname") as refused:
            post(target, body=b"{}", headers={}, timeout=5, ssl_context=ca.client_context())
        assert not refused.value.sent
        assert receiver.deliveries == []
