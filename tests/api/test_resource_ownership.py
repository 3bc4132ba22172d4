"""Resources belong to someone, over REST: `tool_not_permitted` for a kind none of the
caller's tools takes, `not_found` (exactly as for a forged id) for someone else's resource."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from dispatch.models import Resource, Revision
from dispatch.services.principals import agent_create
from tests.api.conftest import Caller, assert_error, draft_payload
from tests.conftest import ALL_TOOLS, World

pytestmark = pytest.mark.django_db

FORGED = "res_" + "Q" * 22


@pytest.fixture
def colleague(world: World) -> Caller:
    """Another agent of the owner's tenant, with the same tools."""
    return Caller(Client(), agent_create(name="colleague", tenant="acme", tools=ALL_TOOLS)[1])


@pytest.fixture
def reader(world: World) -> Caller:
    """An agent of the owner's tenant whose only tool, `crm.lookup`, takes no resource."""
    return Caller(Client(), agent_create(name="reader", tenant="acme", tools=["crm.lookup"])[1])


@pytest.fixture
def draft(owner: Caller) -> dict[str, Any]:
    response = owner.post("resources/", {"kind": "email_draft", "payload": draft_payload()})
    assert response.status_code == 201, response.content
    return dict(response.json())


def revise(caller: Caller, resource_id: str, **payload: Any) -> Any:
    return caller.post(f"resources/{resource_id}/revisions/",
                       {"base_revision": 1, "payload": draft_payload(**payload)})


def assert_like_a_forged_id(seen: Any, made_up: Any, resource_id: str) -> None:
    assert assert_error(seen, 404, "not_found") == {"kind": "resource", "id": resource_id}
    assert assert_error(made_up, 404, "not_found") == {"kind": "resource", "id": FORGED}
    assert seen.json()["error"]["message"] == made_up.json()["error"]["message"]
    assert seen.headers.keys() == made_up.headers.keys()


def test_creating_a_kind_no_tool_takes_is_tool_not_permitted(reader: Caller) -> None:
    response = reader.post("resources/", {"kind": "email_draft", "payload": draft_payload()})
    assert assert_error(response, 403, "tool_not_permitted") == {"kind": "email_draft"}
    assert not Resource.objects.exists()


def test_humans_create_no_resources(caller: Any) -> None:
    for who in ("approver", "admin"):
        response = caller(who).post("resources/", {"kind": "email_draft",
                                                   "payload": draft_payload()})
        assert_error(response, 403, "tool_not_permitted")


def test_a_foreign_resource_edit_answers_like_a_forged_id(
    colleague: Caller, reader: Caller, caller: Any, draft: dict[str, Any],
) -> None:
    for other in (colleague, reader, caller("approver")):
        assert_like_a_forged_id(revise(other, draft["id"], subject="Hijacked"),
                                revise(other, FORGED, subject="Hijacked"), draft["id"])
    assert Revision.objects.count() == 1
    assert Resource.objects.get(id=draft["id"]).current_revision == 1


def test_the_creator_and_an_admin_revise(
    owner: Caller, caller: Any, draft: dict[str, Any],
) -> None:
    mine = revise(owner, draft["id"], subject="Edited")
    assert (mine.status_code, mine.json()["revision"]) == (201, 2)
    fixed = caller("admin").post(f"resources/{draft['id']}/revisions/",
                                 {"base_revision": 2, "payload": draft_payload(subject="Fixed")})
    assert (fixed.status_code, fixed.json()["revision"]) == (201, 3)


def test_who_reads_a_resource(
    owner: Caller, colleague: Caller, reader: Caller, caller: Any, draft: dict[str, Any],
) -> None:
    """The creator, the tenant's admins, and agents with a tool that takes the kind."""
    for allowed in (owner, colleague, caller("admin")):
        response = allowed.get(f"resources/{draft['id']}/")
        assert (response.status_code, response.json()) == (200, draft)
    for other in (reader, caller("approver"), caller("outsider")):
        assert_like_a_forged_id(other.get(f"resources/{draft['id']}/"),
                                other.get(f"resources/{FORGED}/"), draft["id"])
