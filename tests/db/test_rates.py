"""The per-principal rate (dispatch.services.rates): a sliding window counted as the current
fixed window plus the previous one weighted by the part still covered; a refused call is not
counted, and the wait it is told is when a call would be allowed again."""

from __future__ import annotations

import pytest

from dispatch.models import RateWindow
from dispatch.services.rates import rate_take

pytestmark = pytest.mark.django_db

START = 1_800_000_000.0  # the start of a window of 60 s (30_000_000 * 60)


def take(now: float, key: str = "principal:prn_a") -> float | None:
    return rate_take(key=key, limit=10, seconds=60, now=now)


def test_the_limit_holds_and_a_refusal_is_not_counted() -> None:
    assert [take(START + n) for n in range(10)] == [None] * 10
    wait = take(START + 10)
    assert wait is not None
    assert take(START + 11) is not None
    assert RateWindow.objects.get(key="principal:prn_a").current == 10
    # Another principal has its own count.
    assert take(START + 11, key="principal:prn_b") is None


def test_the_previous_window_weighs_what_the_sliding_window_still_covers() -> None:
    for n in range(10):
        assert take(START + 50 + n * 0.5) is None
    # Just after the boundary the previous ten still count in full.
    assert take(START + 60.5) is not None
    # Half way through, five of them count: five more calls, then a refusal.
    assert [take(START + 90 + n * 0.1) for n in range(5)] == [None] * 5
    assert take(START + 90.6) is not None
    # Two windows on, nothing of them counts.
    assert [take(START + 180 + n * 0.1) for n in range(10)] == [None] * 10


def test_the_wait_is_when_a_call_is_allowed_again() -> None:
    for n in range(10):
        take(START + n * 0.1)
    wait = take(START + 1)
    assert wait is not None
    assert take(START + 1 + wait - 1) is not None
    assert take(START + 1 + wait + 0.01) is None


def test_a_first_call_whose_row_another_first_call_made_meanwhile_is_counted_not_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two first calls of one principal at once (two processes, autocommit): this one's UPDATE
    finds no row, the other call makes the row and counts itself, and only then does this one
    look for the row. It is counted, second, not refused as if the limit were reached (the
    intake race over REST met a 429 on a principal's very first two calls)."""
    import dispatch.services.rates as rates

    def the_other_first_call(name: str) -> None:
        if name == "rate.after_update" and not RateWindow.objects.exists():
            RateWindow.objects.create(key="principal:prn_a", window=int(START // 60), current=1)

    monkeypatch.setattr(rates, "failpoint", the_other_first_call)
    assert take(START) is None
    assert RateWindow.objects.get(key="principal:prn_a").current == 2
