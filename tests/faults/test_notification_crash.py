"""A process killed between the approval's commit and the notification's send
(docs/design.md#notifications): a real SIGKILL of a child process, on the test database. The
outbox row outlives it, and the beat sweep delivers the notification once."""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from demo.destinations.runner import list_all
from dispatch.models import Notification
from dispatch.services.notifications import notifications_due
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.processes import ROOT, child_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def killed_at(point: str, *args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.notify_crash", *args], cwd=ROOT,
        env=child_env(DISPATCH_CRASH_AT=point), capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def emails_to(destinations: Destinations, address: str) -> list[dict[str, Any]]:
    return [e for e in list_all(destinations.directory)["email"] if e["to"] == [address]]


@pytest.fixture
def emailed(live: World) -> World:
    get_user_model().objects.filter(username="approver").update(email="approver@acme.example")
    return live


def test_a_worker_killed_after_claiming_before_sending_still_delivers_once(
    emailed: World, destinations: Destinations, settings: Any,
) -> None:
    proposal = emailed.propose_transfer(amount="75.00")  # the approval's transaction commits
    (notification,) = Notification.objects.filter(proposal_id=proposal.id)
    killed_at("notify.before_send", "deliver", notification.id)

    notification.refresh_from_db()
    assert (notification.state, notification.attempts) == ("sending", 1)
    assert emails_to(destinations, "approver@acme.example") == []
    # While the dead worker's claim holds, nobody else sends it.
    assert notifications_due(now=timezone.now(), enqueue=False) == 0
    later = timezone.now() + timedelta(seconds=settings.NOTIFY_CLAIM_SECONDS + 1)
    assert notifications_due(now=later, enqueue=False) == 1
    assert notifications_due(now=later + timedelta(hours=1), enqueue=False) == 0

    (email,) = emails_to(destinations, "approver@acme.example")
    assert notification.id in str(email["message_id"])
    notification.refresh_from_db()
    assert (notification.state, notification.attempts) == ("delivered", 2)
    assert list(notification.attempt_log.order_by("number").values_list(
        "number", "ok", "error")) == [
        (1, False, "the worker stopped before it answered"), (2, True, "")]


def test_a_process_killed_after_the_commit_before_enqueueing_still_delivers_once(
    emailed: World, destinations: Destinations,
) -> None:
    killed_at("notify.before_enqueue", "propose", emailed.owner.id)

    (notification,) = Notification.objects.filter(event="approval.requested")
    assert notification.state == "pending"  # committed with the approval; no task was sent
    assert emails_to(destinations, "approver@acme.example") == []
    assert notifications_due(now=timezone.now(), enqueue=False) == 1
    assert notifications_due(now=timezone.now() + timedelta(hours=1), enqueue=False) == 0
    assert len(emails_to(destinations, "approver@acme.example")) == 1
    notification.refresh_from_db()
    assert (notification.state, notification.attempts) == ("delivered", 1)
