"""Named leases: a lock with an expiry that several processes (beat, workers, a management
command) contend for through the database, so one reconciliation pass runs at a time."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from dispatch.ids import new_id
from dispatch.models import Lease


@contextmanager
def lease(name: str, *, ttl: float) -> Iterator[bool]:
    """Hold lease `name` for the block, or yield False when another holder has it.

    Wall-clock time on purpose: a lease coordinates processes now, whatever business time a
    caller passes down. A holder that dies without releasing it loses it after `ttl` seconds.
    """
    holder = new_id("lse")
    now = timezone.now()
    with transaction.atomic():
        Lease.objects.bulk_create([Lease(name=name, holder="", expires_at=now)],
                                  ignore_conflicts=True)
        taken = Lease.objects.filter(Q(expires_at__lte=now) | Q(holder=""), name=name).update(
            holder=holder, expires_at=now + timedelta(seconds=ttl))
    try:
        yield taken == 1
    finally:
        if taken == 1:
            Lease.objects.filter(name=name, holder=holder).update(holder="", expires_at=now)
