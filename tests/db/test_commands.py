"""Management commands refuse bad input with a clear `CommandError`, never a traceback."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import authenticate
from django.core.management import CommandError, call_command

from dispatch.models import Grant, Principal
from dispatch.services.authority import grant_issue
from dispatch.services.principals import agent_create, human_create
from protocols.denials import Denial, DenialCode
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


def create_human(name: str, password: str) -> str:
    out = StringIO()
    call_command("create_human", name, "--tenant", "acme", "--role", "operator",
                 "--password", password, stdout=out)
    return out.getvalue().strip()


@pytest.mark.parametrize(("password", "problem"), [
    ("pw", "too short"),
    ("olive-operator", "too similar to the username"),
    ("password12345", "too common"),
    ("834759120384", "entirely numeric"),
])
def test_create_human_refuses_a_weak_password_in_production(
    settings: Any, password: str, problem: str,
) -> None:
    settings.DEBUG = False
    with pytest.raises(CommandError, match=f"--password: .*{problem}"):
        create_human("olive-operator", password)
    assert not Principal.objects.filter(name="olive-operator").exists()


def test_create_human_takes_a_strong_password_in_production(settings: Any) -> None:
    settings.DEBUG = False
    assert create_human("olive", "correct horse battery staple")
    assert authenticate(username="olive", password="correct horse battery staple")


def test_create_human_takes_a_demo_password_under_debug(settings: Any) -> None:
    settings.DEBUG = True  # scripts/run.sh, the demo and the tests
    assert create_human("olive", "pw")
    assert authenticate(username="olive", password="pw")


def test_grant_refuses_an_operation_no_contract_has(world: World) -> None:
    """A typo was silently a dead grant (docs/design.md#audit): now it is refused, and nothing is
    made."""
    before = Grant.objects.count()
    with pytest.raises(CommandError, match=r"^no registered contract is named 'crm.lookpu'"):
        call_command("grant", "owner", "crm.lookpu", "--scope", "customer=*", stdout=StringIO())
    assert Grant.objects.count() == before


def test_create_agent_refuses_a_tool_no_contract_has(world: World) -> None:
    before = Principal.objects.count()
    with pytest.raises(CommandError, match=r"^no registered contract is named 'emial.send'"):
        call_command("create_agent", "typo-bot", "--tenant", "acme",
                     "--tools", "crm.lookup,emial.send", stdout=StringIO())
    assert Principal.objects.count() == before


def test_the_services_refuse_unregistered_operations(world: World) -> None:
    for call in (
        lambda: agent_create(name="bot-2", tenant="acme", tools=["crm.lookup", "nope.op"]),
        lambda: human_create(name="h-2", tenant="acme", role="operator", password="pw",
                             tools=["nope.op"]),
        lambda: grant_issue(issuer=world.admin, subject=world.owner, operations=["nope.op"],
                            scope={}, now=world.now),
    ):
        with pytest.raises(Denial) as caught:
            call()
        assert caught.value.code is DenialCode.UNKNOWN_OPERATION
        assert caught.value.details == {"operation": "nope.op"}
    assert not Principal.objects.filter(name__in=["bot-2", "h-2"]).exists()


@pytest.mark.parametrize("who", ["approver", "owner"])
def test_grant_issue_checks_the_issuers_role_itself(world: World, who: str) -> None:
    issuer = {"approver": world.approver, "owner": world.owner}[who]
    before = Grant.objects.count()
    with pytest.raises(Denial) as caught:
        grant_issue(issuer=issuer, subject=world.owner, operations=["crm.lookup"],
                    scope={"customer": "*"}, now=world.now)
    assert caught.value.code is DenialCode.ROLE_REQUIRED
    assert Grant.objects.count() == before
