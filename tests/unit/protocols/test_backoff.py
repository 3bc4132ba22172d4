"""The retry wait (protocols/backoff.py): full jitter below the capped exponential, never sooner
than a destination's Retry-After (itself capped), and Retry-After read in both RFC forms."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols.backoff import parse_retry_after, retry_delay

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(number=st.integers(1, 200), base=st.floats(0, 10), cap=st.floats(0, 100),
       jitter=st.floats(0, 1, exclude_max=True),
       retry_after=st.none() | st.floats(0, 10_000))
def test_the_wait_is_jittered_below_the_capped_exponential_and_honours_retry_after(
        number: int, base: float, cap: float, jitter: float, retry_after: float | None) -> None:
    wait = retry_delay(number, base=base, cap=cap, jitter=jitter, retry_after=retry_after)
    if retry_after is not None and retry_after > cap:
        assert wait is None  # never sooner than asked: no retry from this worker
        return
    assert wait is not None
    ceiling = min(cap, base * 2.0 ** min(number - 1, 62))
    assert 0 <= wait <= max(ceiling, retry_after or 0)
    if retry_after is not None:
        assert wait >= retry_after
    assert wait <= cap


def test_full_jitter_spans_the_whole_range() -> None:
    assert retry_delay(3, base=1, cap=30, jitter=0.0) == 0.0
    assert retry_delay(3, base=1, cap=30, jitter=0.5) == 2.0
    assert retry_delay(10, base=1, cap=30, jitter=0.5) == 15.0  # capped at 30, then halved
    assert retry_delay(1, base=1, cap=30, jitter=0.5, retry_after=31) is None
    assert retry_delay(1, base=1, cap=30, jitter=0.0, retry_after=7) == 7


@pytest.mark.parametrize("bad", [{"number": 0}, {"jitter": 1.0}, {"jitter": -0.1},
                                 {"base": -1.0}])
def test_nonsense_is_refused(bad: dict[str, float]) -> None:
    arguments = {"number": 1, "base": 1.0, "cap": 10.0, "jitter": 0.1, **bad}
    with pytest.raises(ValueError):
        retry_delay(int(arguments.pop("number")), **arguments)


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert parse_retry_after("120", now=NOW) == 120.0
    later = (NOW + timedelta(seconds=90)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert parse_retry_after(later, now=NOW) == 90.0
    earlier = (NOW - timedelta(seconds=90)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert parse_retry_after(earlier, now=NOW) == 0.0
    assert parse_retry_after(None, now=NOW) is None
    assert parse_retry_after("soon", now=NOW) is None
    assert parse_retry_after("-5", now=NOW) is None
    assert parse_retry_after("\u00b2", now=NOW) is None  # a digit to str.isdigit, not to HTTP
    assert parse_retry_after("9" * 400, now=NOW) is None
