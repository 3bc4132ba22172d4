from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from protocols.expiry import LATEST, TOO_LATE, expiry_after

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def test_expiry_after_adds_the_seconds() -> None:
    assert expiry_after(NOW, 90) == NOW + timedelta(seconds=90)


def test_the_last_instant_is_an_expiry() -> None:
    seconds = (LATEST - NOW) // timedelta(seconds=1)
    assert expiry_after(NOW, seconds) <= LATEST


@pytest.mark.parametrize("seconds", [
    (LATEST - NOW) // timedelta(seconds=1) + 1,  # one second past the last instant
    10**14,  # a timedelta, but the sum is past the end
    10**20,  # not even a timedelta
])
def test_an_expiry_past_the_last_instant_is_refused(seconds: int) -> None:
    with pytest.raises(ValueError, match=TOO_LATE):
        expiry_after(NOW, seconds)


@pytest.mark.parametrize("seconds", [0, -1, -(10**20)])
def test_an_expiry_not_ahead_is_refused(seconds: int) -> None:
    with pytest.raises(ValueError, match="must be at least 1 second"):
        expiry_after(NOW, seconds)
