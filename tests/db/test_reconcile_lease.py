"""The reconciliation pass's lease after a crash (the chaos soak, docs/reliability.md#chaos).

A worker killed during a pass, or a pass whose database went away, never releases the pass's
lease. With a lease of 300 s, every pass after it was skipped for five minutes: in the soak's
first full run (seed 31) two operations left `claimed` by a PostgreSQL crash waited 5 min 17 s
and 3 min 46 s for their requeue. The lease now lasts `RECONCILE_LEASE_SECONDS` (30 s) from the
pass's last operation: a live pass renews it as it goes, a dead one stops blocking soon.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from dispatch.models import Lease
from dispatch.services import reconciliation
from dispatch.services.leases import lease
from dispatch.services.reconciliation import reconcile_operations
from tests.conftest import World
from tests.db.test_bounded_reconciliation import unknown_transfers
from tests.support.claims import LATER

pytestmark = pytest.mark.django_db


def test_a_dead_pass_blocks_the_next_ones_for_the_lease_alone(
    world: World, monkeypatch: pytest.MonkeyPatch, settings: Any,
) -> None:
    (operation,) = unknown_transfers(world, 1)
    monkeypatch.setattr("demo.handlers.bank_lookup", lambda base_url, key, timeout: {"key": key})
    settings.RECONCILE_LEASE_SECONDS = 1.0
    # A pass that took the lease and died: never released, its expiry one lease from now.
    with lease("reconcile-pass", ttl=settings.RECONCILE_LEASE_SECONDS) as held:
        assert held
        Lease.objects.filter(name="reconcile-pass").update(holder="lse_dead")
    assert reconcile_operations(now=world.now + LATER, enqueue=False)["skipped"] is True
    time.sleep(1.2)
    counts = reconcile_operations(now=world.now + LATER, enqueue=False)
    assert "skipped" not in counts and counts["reconciled"] == 1
    operation.refresh_from_db()
    assert operation.state == "reconciled_completed"


def test_a_live_pass_longer_than_the_lease_keeps_it(
    world: World, monkeypatch: pytest.MonkeyPatch, settings: Any,
) -> None:
    unknown_transfers(world, 3)
    settings.RECONCILE_LEASE_SECONDS = 0.5
    real = reconciliation._reconcile_unknown
    others: list[bool] = []

    def slow(operation: Any, now: Any, *, enqueue: bool) -> str:
        time.sleep(0.4)  # three of them outlast the lease
        with lease("reconcile-pass", ttl=0.5) as other:  # another pass, meanwhile
            others.append(bool(other))
        return real(operation, now, enqueue=enqueue)

    monkeypatch.setattr(reconciliation, "_reconcile_unknown", slow)
    monkeypatch.setattr("demo.handlers.bank_lookup", lambda base_url, key, timeout: {"key": key})
    counts = reconcile_operations(now=world.now + LATER, enqueue=False)
    assert counts["reconciled"] == 3
    assert others == [False, False, False]


def test_a_pass_that_lost_its_lease_stops() -> None:
    with lease("reconcile-pass", ttl=30) as held:
        assert held.renew()
        Lease.objects.filter(name="reconcile-pass").update(
            holder="lse_other", expires_at=timezone.now() + timedelta(seconds=30))
        assert not held.renew()
        assert not held
    # The other holder's lease is left alone.
    assert Lease.objects.get(name="reconcile-pass").holder == "lse_other"


def test_the_default_lease_lets_a_crash_block_passes_for_half_a_minute_at_most() -> None:
    assert django_settings.RECONCILE_LEASE_SECONDS <= 30
    assert django_settings.RECONCILE_LEASE_SECONDS > django_settings.RECONCILE_LOOKUP_TIMEOUT
