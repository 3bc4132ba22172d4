"""The wait before a retry under the same key (docs/design.md#outcomes): exponential with full
jitter, capped, honouring the destination's `Retry-After`.

Attempt `number` ended uncertain; the wait before attempt `number + 1` is drawn uniformly from
`[0, min(cap, base * 2 ** (number - 1)))` ("full jitter": concurrent retries of one outage
spread out instead of arriving together), and is never shorter than what the destination
asked for in `Retry-After`. A destination that asks for longer than `cap` gets no retry from
this worker (`None`): it is never retried sooner than it asked, and a worker is not parked for
an hour. How many retries there are stays the contract's `max_attempts` and the budgets'; this
only decides when. Pure: the jitter is an argument in `[0, 1)`.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

#: delay-seconds as a destination may send it: ASCII digits, bounded (a longer number is no
#: delay a retry could honour, and int() of it would cost).
_SECONDS = re.compile(r"[0-9]{1,10}")


def retry_delay(number: int, *, base: float, cap: float, jitter: float,
                retry_after: float | None = None) -> float | None:
    """Seconds to wait after uncertain attempt `number` (>= 1) before the next one; None when
    the destination asked to wait longer than `cap`."""
    if number < 1:
        raise ValueError(f"an attempt number is >= 1, not {number}")
    if not 0.0 <= jitter < 1.0:
        raise ValueError(f"jitter is in [0, 1), not {jitter}")
    if base < 0 or cap < 0:
        raise ValueError("base and cap are seconds >= 0")
    asked = retry_after if retry_after is not None and retry_after > 0 else 0.0
    if asked > cap:
        return None
    ceiling = min(cap, base * 2.0 ** min(number - 1, 62))
    return max(jitter * ceiling, asked)


def parse_retry_after(value: str | None, *, now: datetime) -> float | None:
    """A `Retry-After` header (RFC 9110 §10.2.3: delay-seconds or an HTTP-date) as seconds from
    `now`; None when absent or unusable (then only the backoff decides)."""
    if value is None:
        return None
    text = value.strip()
    if _SECONDS.fullmatch(text):
        return float(int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, OverflowError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = (when - now).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None
