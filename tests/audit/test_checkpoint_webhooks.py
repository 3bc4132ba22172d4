"""Checkpoints posted to `AUDIT_CHECKPOINT_WEBHOOKS` (docs/audit-seal.md#witness): each one in
the Standard Webhooks format, verified by a real receiver on loopback with the reference library;
a receiver that fails never holds up sealing."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from standardwebhooks.webhooks import Webhook

from dispatch.models import AuditBlock, Notification
from dispatch.services.notifications import notification_deliver
from dispatch.services.sealer import seal_all
from tests.audit.conftest import add_events
from tests.conftest import make_world
from tests.support.webhooks import webhook_receiver

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the Standard Webhooks spec's example key


def test_each_checkpoint_is_posted_signed_and_a_failing_witness_holds_nothing_up(
        db: None, now: datetime, settings: Any) -> None:
    world = make_world(now)
    tenant = world.owner.tenant.id
    with webhook_receiver("ok") as witness, webhook_receiver("fail") as broken:
        settings.AUDIT_CHECKPOINT_WEBHOOKS = [{"url": witness.url, "secret": SECRET},
                                              {"url": broken.url, "secret": SECRET}]
        for n in range(2):  # after the world's own events, each sealed in a pass of its own
            add_events(world, 2, now + timedelta(seconds=n + 1))
            assert seal_all(now=now + timedelta(seconds=n + 2)) > 0
        assert AuditBlock.objects.filter(tenant_id=tenant).count() >= 2
        outbox = list(Notification.objects.filter(tenant_id=tenant, event="audit.checkpoint")
                      .order_by("created_at", "id"))
        assert len(outbox) == 2 * AuditBlock.objects.filter(tenant_id=tenant).count()
        states = {row.recipient: notification_deliver(notification_id=row.id, enqueue=False)
                  for row in outbox}
        assert states[witness.url] == "delivered"
        assert states[broken.url] == "pending"  # retried later; sealing went on regardless
        heard = [Webhook(SECRET).verify(d.body, d.headers) for d in witness.deliveries]
    log = Path(settings.AUDIT_CHECKPOINT_DIR) / f"{tenant}.jsonl"
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [event["type"] for event in heard] == ["audit.checkpoint"] * len(logged)
    assert [event["data"] for event in heard] == logged
