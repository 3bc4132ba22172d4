"""Resources belong to someone: only a principal with a tool that takes the kind creates one,
only its creator (or an admin) revises it, and a resource another principal may not see
answers exactly like a forged id."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch.models import AuditEvent, Principal, Resource, Revision
from dispatch.services.access import access_resource_by_id
from dispatch.services.principals import agent_create, human_create
from dispatch.services.resources import resource_create, revision_create
from protocols.denials import Denial, DenialCode
from tests.conftest import ALL_TOOLS, MAILBOX, World
from tests.support.claims import refused

pytestmark = pytest.mark.django_db

PAYLOAD = {"from": MAILBOX, "to": ["customer@example.com"], "subject": "Your refund",
           "body": "We have refunded your order."}
FORGED = "res_forged0000000000000000"


@pytest.fixture
def colleague(world: World) -> Principal:
    """Another agent of the owner's tenant, with the same tools."""
    return agent_create(name="colleague", tenant="acme", tools=ALL_TOOLS)[0]


@pytest.fixture
def reader(world: World) -> Principal:
    """An agent of the owner's tenant whose only tool takes no resource."""
    return agent_create(name="reader", tenant="acme", tools=["crm.lookup"])[0]


def revise(world: World, principal: Principal, resource_id: str, **payload: Any) -> Any:
    return revision_create(principal=principal, resource_id=resource_id, base_revision=1,
                           payload={**PAYLOAD, **payload}, now=world.now)


def rows() -> dict[str, Any]:
    return {"resources": sorted(Resource.objects.values_list("id", "current_revision", "state")),
            "revisions": Revision.objects.count(), "audit": AuditEvent.objects.count()}


def assert_like_a_forged_id(denial: Denial, resource_id: str, forged: Denial) -> None:
    assert denial.code is forged.code is DenialCode.NOT_FOUND
    assert denial.message == forged.message
    assert denial.details == {**forged.details, "id": resource_id}


def test_an_agent_with_no_tool_taking_the_kind_cannot_create_it(
    world: World, reader: Principal,
) -> None:
    before = rows()
    denial = refused(resource_create, principal=reader, kind="email_draft", payload=PAYLOAD,
                     now=world.now)
    assert denial.code is DenialCode.TOOL_NOT_PERMITTED
    assert denial.details == {"kind": "email_draft"}
    assert rows() == before


def test_humans_have_no_tools_so_create_no_resources(world: World) -> None:
    for human in (world.approver, world.admin):
        denial = refused(resource_create, principal=human, kind="email_draft",
                         payload=PAYLOAD, now=world.now)
        assert denial.code is DenialCode.TOOL_NOT_PERMITTED


def test_an_unknown_kind_is_still_schema_invalid(world: World, reader: Principal) -> None:
    denial = refused(resource_create, principal=reader, kind="spreadsheet", payload={},
                     now=world.now)
    assert denial.code is DenialCode.SCHEMA_INVALID


def test_the_creator_revises_its_resource(world: World) -> None:
    draft = world.draft()
    resource, revision = revise(world, world.owner, draft.id, subject="Edited")
    assert (resource.current_revision, revision.payload["subject"]) == (2, "Edited")
    assert revision.created_by_id == world.owner.id


def test_another_agent_of_the_tenant_cannot_revise_it(
    world: World, colleague: Principal, reader: Principal,
) -> None:
    draft = world.draft()
    forged = refused(revise, world=world, principal=colleague, resource_id=FORGED)
    before = rows()
    for other in (colleague, reader, world.approver):
        assert_like_a_forged_id(refused(revise, world=world, principal=other,
                                        resource_id=draft.id), draft.id, forged)
    assert rows() == before


def test_an_admin_revises_any_resource_of_the_tenant(world: World) -> None:
    draft = world.draft()
    resource, revision = revise(world, world.admin, draft.id, subject="Fixed by an admin")
    assert (resource.current_revision, revision.created_by_id) == (2, world.admin.id)


def test_an_admin_of_another_tenant_cannot(world: World) -> None:
    draft = world.draft()
    stranger, _ = human_create(name="globex-admin", tenant="globex", role="admin", password="pw")
    forged = refused(revise, world=world, principal=stranger, resource_id=FORGED)
    assert_like_a_forged_id(refused(revise, world=world, principal=stranger,
                                    resource_id=draft.id), draft.id, forged)


def test_a_creator_who_lost_the_tool_cannot_revise(world: World) -> None:
    draft = world.draft()
    Principal.objects.filter(id=world.owner.id).update(tools=["crm.lookup"])
    world.owner.refresh_from_db()
    before = rows()
    denial = refused(revise, world=world, principal=world.owner, resource_id=draft.id)
    assert denial.code is DenialCode.TOOL_NOT_PERMITTED
    assert denial.details == {"kind": "email_draft"}
    assert rows() == before


def test_who_may_read_a_resource(world: World, colleague: Principal, reader: Principal) -> None:
    """Its creator, the tenant's admins, and principals with a tool that takes its kind."""
    draft = world.draft()
    for allowed in (world.owner, colleague, world.admin):
        assert access_resource_by_id(allowed, draft.id).id == draft.id
    forged = refused(access_resource_by_id, principal=reader, resource_id=FORGED)
    for other in (reader, world.approver, world.outsider):
        assert_like_a_forged_id(refused(access_resource_by_id, principal=other,
                                        resource_id=draft.id), draft.id, forged)
    # A creator who lost the tool still reads what it made.
    Principal.objects.filter(id=world.owner.id).update(tools=[])
    world.owner.refresh_from_db()
    assert access_resource_by_id(world.owner, draft.id).id == draft.id
