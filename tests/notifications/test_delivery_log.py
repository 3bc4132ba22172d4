"""The admins' delivery log page of notifications (docs/design.md#notifications)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from dispatch.models import Notification
from tests.conftest import World

pytestmark = pytest.mark.django_db


def test_the_delivery_log_is_for_admins(world: World, settings: Any) -> None:
    settings.NOTIFY_WEBHOOKS = [{"url": "http://127.0.0.1:9/hooks",
                                 "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}]
    proposal = world.propose_transfer()
    (notification,) = Notification.objects.filter(proposal_id=proposal.id)
    admin = Client()
    admin.login(username="admin", password="admin-pw")
    page = admin.get("/console/notifications/")
    assert page.status_code == 200
    text = page.content.decode()
    assert notification.id in text
    assert "approval.requested" in text
    assert proposal.approval.id in text
    assert "whsec_" not in text
    assert 'href="/console/notifications/"' in text
    operator = Client()
    operator.login(username="approver", password="approver-pw")
    assert operator.get("/console/notifications/").status_code == 403
    assert 'href="/console/notifications/"' not in operator.get("/console/").content.decode()
