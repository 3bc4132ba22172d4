"""Renewed approval over REST: `POST operations/{id}/reauthorize/` and
`POST renewals/{id}/decision/` (docs/design.md#renewals, docs/rest-api.md#calls)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from demo.destinations.runner import list_all
from tests.api.conftest import Caller, assert_error
from tests.conftest import World
from tests.db.test_renewals import stopped_transfer
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db


def test_a_renewal_over_rest_runs_the_same_operation_again(
    live: World, destinations: Destinations, caller: Callable[[str | None], Caller],
    django_capture_on_commit_callbacks: Any, eager: None,
) -> None:
    operation = stopped_transfer(live)
    admin, approver, owner = caller("admin"), caller("approver"), caller("owner")
    response = admin.post(f"operations/{operation.id}/reauthorize/", {"reason": "bank was down"})
    assert response.status_code == 201, response.content
    renewal = response.json()
    assert set(renewal) == {"id", "operation_id", "attempt", "digest", "state", "requested_by",
                            "expires_at"}
    assert (renewal["operation_id"], renewal["attempt"], renewal["state"]) == (
        operation.id, 2, "pending")
    assert renewal["digest"] == operation.proposal.digest
    assert_error(owner.post(f"operations/{operation.id}/reauthorize/", {}), 409,
                 "approval_pending")
    decision = {"decision": "grant", "digest": renewal["digest"]}
    assert_error(admin.post(f"renewals/{renewal['id']}/decision/", decision), 403,
                 "approver_is_requester")
    assert_error(owner.post(f"renewals/{renewal['id']}/decision/", decision), 403,
                 "role_required")
    with django_capture_on_commit_callbacks(execute=True):
        response = approver.post(f"renewals/{renewal['id']}/decision/", decision)
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "granted"
    after = admin.get(f"operations/{operation.id}/").json()
    assert after["state"] == "completed"
    assert len(list_all(destinations.directory)["bank"]) == 1


def test_bad_renewal_requests_are_refused_clearly(
    live: World, caller: Callable[[str | None], Caller],
) -> None:
    admin = caller("admin")
    assert_error(admin.post("operations/op_nothing/reauthorize/", {}), 404, "not_found")
    assert_error(admin.post("renewals/ren_nothing/decision/",
                            {"decision": "grant", "digest": "x"}), 404, "not_found")
    assert_error(admin.post("operations/op_nothing/reauthorize/", raw=b""), 400,
                 "malformed_request")
    operation = stopped_transfer(live)
    assert_error(caller("outsider_admin").post(f"operations/{operation.id}/reauthorize/", {}),
                 404, "not_found")
    assert_error(admin.post(f"operations/{operation.id}/reauthorize/", {"reason": 5}), 422,
                 "schema_invalid")
