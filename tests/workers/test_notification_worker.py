"""Notifications on real Celery workers over a real Redis broker
(docs/design.md#notifications): a worker killed between the approval's commit and the
notification's send leaves the outbox row claimed; once the claim lapses, a worker delivers it,
and the approver receives it once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from demo.destinations.runner import list_all
from dispatch.models import Notification
from dispatch.queue import NOTIFY
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.workers import wait_for, worker_pool

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.slow]

#: The dead worker's claim must outlast the kill, a second worker's start and one message to it:
#: 10 s lapsed first on a loaded CI machine (four test passes on two cores).
CLAIM_SECONDS = 25


def state_of(notification: Notification) -> tuple[str, int]:
    notification.refresh_from_db()
    return notification.state, notification.attempts


def test_a_worker_killed_before_the_send_still_delivers_once(
    live: World, destinations: Destinations, tmp_path: Path, settings: Any,
) -> None:
    get_user_model().objects.filter(username="approver").update(email="approver@acme.example")
    with worker_pool(tmp_path) as pool:
        doomed = pool.start(DISPATCH_CRASH_AT="notify.before_send",
                            NOTIFY_CLAIM_SECONDS=str(CLAIM_SECONDS))
        proposal = live.propose_transfer(amount="64.00")  # the approval commits
        (notification,) = Notification.objects.filter(proposal_id=proposal.id)
        pool.send_task(NOTIFY, notification.id)
        # The worker's process claims the row, then dies by SIGKILL before sending.
        wait_for(lambda: state_of(notification) == ("sending", 1), 30, "the claim")
        wait_for(lambda: "WorkerLostError" in doomed.output() or "SIGKILL" in doomed.output()
                 or "signal 9" in doomed.output(), 30, "the worker's process to be killed")
        doomed.kill()
        assert list_all(destinations.directory)["email"] == []

        second = pool.start(NOTIFY_CLAIM_SECONDS=str(CLAIM_SECONDS))
        # A message for the row while the dead worker's claim holds sends nothing.
        assert Notification.objects.filter(id=notification.id,
                                           claimed_until__gt=timezone.now()).exists()
        pool.send_task(NOTIFY, notification.id)
        wait_for(lambda: second.output().count("succeeded") >= 1, 30, "the message")
        assert state_of(notification) == ("sending", 1)
        # After it lapses, the beat sweep's message delivers it.
        while Notification.objects.filter(id=notification.id,
                                          claimed_until__gt=timezone.now()).exists():
            time.sleep(0.2)
        pool.send_task(NOTIFY, notification.id)
        pool.send_task(NOTIFY, notification.id)  # a duplicate message changes nothing
        wait_for(lambda: state_of(notification) == ("delivered", 2), 30, "the delivery")

    emails = [e for e in list_all(destinations.directory)["email"]
              if e["to"] == ["approver@acme.example"]]
    assert len(emails) == 1
    assert notification.id in str(emails[0]["message_id"])
    assert list(notification.attempt_log.order_by("number").values_list("number", "ok")) == [
        (1, False), (2, True)]

