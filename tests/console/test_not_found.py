"""Every console page that loads a record by its id answers an id that does not exist, or that
belongs to another tenant, with the one not-found page (`console.roles.role_required`): the
views load without catching it, and nothing tells a missing record from a forbidden one."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from console.roles import role_required
from protocols.denials import Denial, DenialCode
from protocols.roles import Role
from tests.conftest import World
from tests.console.conftest import Browser, text

pytestmark = pytest.mark.django_db

#: Each page or form that loads one record by the id in its address.
PAGES = [("get", "/console/approvals/{}/"), ("get", "/console/approvals/{}/follow/"),
         ("post", "/console/approvals/{}/decide/"), ("get", "/console/operations/{}/"),
         ("post", "/console/operations/{}/resolve/"), ("get", "/console/renewals/{}/"),
         ("post", "/console/renewals/{}/decide/"), ("get", "/console/questions/{}/"),
         ("post", "/console/grants/{}/revoke/")]


@pytest.mark.parametrize(("method", "address"), PAGES)
def test_an_unknown_id_is_the_one_not_found_page(admin: Browser, method: str,
                                                 address: str) -> None:
    url = address.format("nope_0000")
    response = admin.get(url) if method == "get" else admin.post(url, {"decision": "deny"})
    assert response.status_code == 404
    assert "Not found" in text(response)


def test_another_tenants_approval_is_not_found_either(
        world: World, as_user: Callable[[str, str], Browser]) -> None:
    proposal = world.propose_transfer()
    outsider = as_user("outsider-operator", "pw")
    assert outsider.get("/console/").status_code == 200
    response = outsider.get(f"/console/approvals/{proposal.approval.id}/")
    assert response.status_code == 404
    assert "Not found" in text(response)


def test_only_a_not_found_refusal_becomes_the_page(world: World) -> None:
    """Any other refusal a view lets escape is an error, never a not-found page."""
    from django.test import RequestFactory

    @role_required(Role.OPERATOR)
    def view(request: object, principal: object) -> object:
        raise Denial(DenialCode.PROTOCOL_STATE_INVALID, "not now")

    request = RequestFactory().get("/")
    request.user = world.approver.user
    with pytest.raises(Denial):
        view(request)
