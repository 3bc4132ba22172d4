"""Budget reservation before the claim, released when the claim fails (spec §7 step 6, §9).

A reservation is one conditional UPDATE whose WHERE clause keeps `used + cost <= limit`; the
CheckConstraint on the table is the backstop. Work already attempted is not refunded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import F

from dispatch.models import BudgetCounter
from protocols.denials import Denial, DenialCode


@dataclass(frozen=True)
class Reservation:
    keys: tuple[str, ...]
    cost: int


def budget_keys(*, principal_id: str, execution_id: str, now: datetime) -> list[tuple[str, int]]:
    return [
        (f"principal:{principal_id}:{now:%Y%m%d%H}", settings.BUDGET_TOOL_CALLS_PER_PRINCIPAL),
        (f"execution:{principal_id}:{execution_id}", settings.BUDGET_TOOL_CALLS_PER_EXECUTION),
    ]


def budget_reserve(*, limits: Sequence[tuple[str, int]], cost: int) -> Reservation:
    """Reserve `cost` on every key, all or nothing; `budget_exhausted` names the full one."""
    # Rows are always locked in key order, here and in release, so that two reservations
    # (or a reservation and a release) can never wait on each other in a cycle.
    with transaction.atomic():
        for key, limit in sorted(limits):
            # get_or_create absorbs a concurrent insert of the same key in its own savepoint.
            BudgetCounter.objects.get_or_create(key=key, defaults={"limit": limit})
            took = BudgetCounter.objects.filter(
                key=key, used__lte=F("limit") - cost
            ).update(used=F("used") + cost)
            if took != 1:
                transaction.set_rollback(True)
                raise Denial(DenialCode.BUDGET_EXHAUSTED, budget=key.split(":")[0])
    return Reservation(keys=tuple(key for key, _ in limits), cost=cost)


def budget_release(reservation: Reservation) -> None:
    with transaction.atomic():
        for key in sorted(reservation.keys):
            BudgetCounter.objects.filter(key=key, used__gte=reservation.cost).update(
                used=F("used") - reservation.cost)
