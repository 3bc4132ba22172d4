"""Named leases: a lock with an expiry that several processes (beat, workers, a management
command) contend for through the database, so one reconciliation pass runs at a time."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from dispatch.ids import new_id
from dispatch.models import Lease


@dataclass
class Held:
    """What `lease` yields: true when the lease is held, and how to keep it."""

    name: str
    holder: str
    ttl: float
    taken: bool

    def __bool__(self) -> bool:
        return self.taken

    def renew(self) -> bool:
        """Hold the lease `ttl` seconds from now; False when it is not held (any more): it
        lapsed and another holder took it."""
        if not self.taken:
            return False
        expires = timezone.now() + timedelta(seconds=self.ttl)
        self.taken = Lease.objects.filter(name=self.name, holder=self.holder).update(
            expires_at=expires) == 1
        return self.taken


@contextmanager
def lease(name: str, *, ttl: float) -> Iterator[Held]:
    """Hold lease `name` for the block, or yield a false `Held` when another holder has it.

    Wall-clock time on purpose: a lease coordinates processes now, whatever business time a
    caller passes down. A holder that dies without releasing it loses it after `ttl` seconds;
    a live holder whose work outlasts `ttl` renews it as it goes (`Held.renew`).
    """
    holder = new_id("lse")
    now = timezone.now()
    with transaction.atomic():
        Lease.objects.bulk_create([Lease(name=name, holder="", expires_at=now)],
                                  ignore_conflicts=True)
        taken = Lease.objects.filter(Q(expires_at__lte=now) | Q(holder=""), name=name).update(
            holder=holder, expires_at=now + timedelta(seconds=ttl))
    held = Held(name, holder, ttl, taken == 1)
    try:
        yield held
    finally:
        if taken == 1:
            Lease.objects.filter(name=name, holder=holder).update(holder="", expires_at=now)
