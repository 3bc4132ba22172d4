"""Management commands refuse bad input with a clear `CommandError`, never a traceback."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from dispatch.models import Grant
from tests.conftest import World

pytestmark = pytest.mark.django_db


def grant(*args: str) -> str:
    out = StringIO()
    call_command("grant", "owner", "crm.lookup", "--scope", "customer=*", *args, stdout=out)
    return out.getvalue().strip()


@pytest.mark.parametrize("seconds", [10**20, 10**14, 2**63])
def test_grant_refuses_an_expiry_no_datetime_can_hold(world: World, seconds: int) -> None:
    before = Grant.objects.count()
    with pytest.raises(CommandError, match=r"^--expires-in \d+: that expiry is after "
                                           r"9999-12-31T23:59:59\.999999Z"):
        grant("--expires-in", str(seconds))
    assert Grant.objects.count() == before


@pytest.mark.parametrize("seconds", [0, -1, -(10**20)])
def test_grant_refuses_an_expiry_that_is_not_ahead(world: World, seconds: int) -> None:
    with pytest.raises(CommandError, match=r"^--expires-in must be at least 1 second"):
        grant(f"--expires-in={seconds}")


def test_grant_prints_the_id_of_a_grant_with_a_far_expiry(world: World) -> None:
    grant_id = grant("--expires-in", str(100 * 365 * 86400))
    assert Grant.objects.get(id=grant_id).expires_at.year >= 2100
