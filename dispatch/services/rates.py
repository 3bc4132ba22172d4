"""The per-principal request rate, shared by every web worker on every machine
(docs/design.md#denials): the one writer of `RateWindow`.

The rate is a sliding window of `seconds`, counted as two fixed windows: the calls of the
current window, plus those of the previous one weighted by the part of it that the sliding
window still covers. A call is counted, and allowed, by one conditional UPDATE of the
principal's row (a refused call tries it twice: its row may have been made by a concurrent
first call just after the first try looked): the database serializes concurrent calls on that
row (PostgreSQL's row lock, SQLite's write lock), so of any number of parallel calls at most
`limit` get through, whichever process or machine serves them. A refused call is not counted.
"""

from __future__ import annotations

import math

from django.db.models import Case, F, Q, Value, When
from django.db.models.lookups import LessThanOrEqual

from dispatch.failpoints import failpoint
from dispatch.models import RateWindow


def rate_take(*, key: str, limit: int, seconds: int, now: float) -> float | None:
    """Count one call of `key` at `now` (seconds since the epoch) and return None if it is
    within `limit` calls per `seconds`; else count nothing and return the seconds until a call
    would be allowed."""
    window = math.floor(now / seconds)
    covered = 1.0 - (now - window * seconds) / seconds  # of the previous window, still inside
    # A row another machine, its clock ahead, moved to a later window counts as this window.
    this, last, older = Q(window__gte=window), Q(window=window - 1), Q(window__lt=window - 1)
    within = (
        (this & Q(LessThanOrEqual(F("current") + F("previous") * Value(covered), limit - 1)))
        | (last & Q(LessThanOrEqual(F("current") * Value(covered), limit - 1)))
        | (older & Q(LessThanOrEqual(Value(0), limit - 1)))
    )
    previous = Case(When(this, then=F("previous")), When(last, then=F("current")),
                    default=Value(0))
    current = Case(When(this, then=F("current") + 1), default=Value(1))
    moved = Case(When(this, then=F("window")), default=Value(window))
    for attempt in range(2):
        if RateWindow.objects.filter(within, key=key).update(
                previous=previous, current=current, window=moved) == 1:
            return None
        failpoint("rate.after_update")
        if attempt == 0:
            # No row to count in: the principal's first call (its row is made here), a
            # concurrent first call's row made after the UPDATE looked, or the limit reached
            # (the insert does nothing). The same UPDATE again tells which.
            RateWindow.objects.bulk_create([RateWindow(key=key, window=window)],
                                           ignore_conflicts=True)
    return _wait(key=key, limit=limit, seconds=seconds, now=now)


def _wait(*, key: str, limit: int, seconds: int, now: float) -> float:
    """Roughly how long until `rate_take` would allow a call of `key`: advice for
    `Retry-After`, never a decision."""
    row = RateWindow.objects.filter(key=key).first()
    window = math.floor(now / seconds)
    fraction = (now - window * seconds) / seconds
    if row is None or row.window < window - 1:
        return 1.0
    current, previous = (row.current, row.previous) if row.window >= window else (0, row.current)
    if current > limit - 1:
        # Not in this window: in the next one, once this window's weight has fallen enough.
        after = 1.0 - (limit - 1) / current if current else 0.0
        return max(1.0, ((1.0 - fraction) + after) * seconds)
    needed = 1.0 - (limit - 1 - current) / previous if previous else fraction
    return max(1.0, (needed - fraction) * seconds)
