"""Expiries a datetime can hold: a later one is refused as input, never a 500
(docs/design.md#denials).

`datetime` ends at 9999-12-31T23:59:59.999999; an expiry given in seconds from now, or as a
date whose offset carries it past that instant, cannot be represented, so it is refused with
`TOO_LATE` by whichever layer reads it (API field, console form, management command).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

#: The last instant a `datetime` can hold, and so the latest expiry.
LATEST = datetime.max.replace(tzinfo=UTC)
TOO_LATE = "is after 9999-12-31T23:59:59.999999Z, the latest expiry that can be stored"
#: The longest span, in seconds, between two instants a `datetime` can hold: a validity given
#: in seconds that is longer ends after `LATEST` whatever the clock says, so a declaration
#: (a workflow's `delegate.expires_in`) can be refused before any clock is read.
LONGEST_EXPIRY = int((LATEST - datetime.min.replace(tzinfo=UTC)).total_seconds())
BEYOND_ANY_DATE = f"is longer than {LONGEST_EXPIRY} seconds: no date can hold its end"


def expiry_after(now: datetime, seconds: int) -> datetime:
    """`now` plus `seconds`: `ValueError` unless at least a second ahead and no later than
    `LATEST`, the arithmetic the caller would otherwise see raise `OverflowError`."""
    if seconds < 1:
        raise ValueError("must be at least 1 second")
    try:
        return now + timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(TOO_LATE) from None
