"""Role checks live inside the services that need them (docs/design.md#concepts), not only in
views."""

from __future__ import annotations

import pytest

from dispatch.models import Grant
from dispatch.services.authority import grant_issue
from protocols.denials import Denial, DenialCode
from tests.conftest import World

pytestmark = pytest.mark.django_db


def issue(world: World, issuer: object) -> Grant:
    return grant_issue(issuer=issuer, subject=world.owner,  # type: ignore[arg-type]
                       operations=["crm.lookup"], scope={"customer": ["cus-001"]},
                       now=world.now)


def test_only_an_admin_of_the_tenant_issues_a_grant(world: World) -> None:
    before = Grant.objects.count()
    for issuer, code in ((world.approver, DenialCode.ROLE_REQUIRED),
                         (world.owner, DenialCode.ROLE_REQUIRED),
                         (world.outsider_operator, DenialCode.ROLE_REQUIRED)):
        with pytest.raises(Denial) as denied:
            issue(world, issuer)
        assert denied.value.code is code
    assert Grant.objects.count() == before
    grant = issue(world, world.admin)
    assert grant.issuer == world.admin.name


def test_an_admin_of_another_tenant_finds_no_such_subject(world: World) -> None:
    from dispatch.services.principals import human_create

    stranger, _ = human_create(name="stranger", tenant="globex", role="admin", password="pw")
    with pytest.raises(Denial) as denied:
        issue(world, stranger)
    assert denied.value.code is DenialCode.NOT_FOUND


def test_the_hosts_own_commands_issue_under_a_name(world: World) -> None:
    assert issue(world, "admin").issuer == "admin"
