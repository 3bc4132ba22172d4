"""The unknown-outcome page offers a renewed approval where one is safe, and another admin
approves it there (docs/design.md#renewals)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dispatch.models import Operation, Renewal
from dispatch.services.principals import human_create
from tests.conftest import World
from tests.console.conftest import Browser
from tests.db.test_renewals import stopped_transfer

pytestmark = pytest.mark.django_db


def test_an_admin_asks_and_another_approves_on_the_operation_page(
    live: World, as_user: Callable[[str, str], Browser],
) -> None:
    operation = stopped_transfer(live)
    human_create(name="second-admin", tenant="acme", role="admin", password="pw2")
    admin = as_user("admin", "admin-pw")
    url = f"/console/operations/{operation.id}/"
    page = admin.get(url).content.decode()
    assert "Request a renewed approval" in page
    response = admin.post(f"/console/operations/{operation.id}/reauthorize/",
                          {"reason": "the bank was down"})
    assert response.status_code == 302
    renewal = Renewal.objects.get(operation=operation)
    page = admin.get(url).content.decode()
    assert f"Attempt {renewal.attempt} of this operation" in page
    assert "another operator decides" in page  # the requester cannot approve it
    assert "Approve attempt" not in page

    second = as_user("second-admin", "pw2")
    page = second.get(url).content.decode()
    assert f"Approve attempt {renewal.attempt}" in page
    response = second.post(f"/console/renewals/{renewal.id}/decide/",
                           {"decision": "grant", "digest": renewal.digest, "reason": ""})
    assert response.status_code == 302
    assert Renewal.objects.get(id=renewal.id).state == "granted"
    assert Operation.objects.get(id=operation.id).state == "claimed"


def test_the_page_says_why_an_email_is_not_renewable(
    live: World, as_user: Callable[[str, str], Browser],
) -> None:
    from dispatch.services.dispatcher import proposal_dispatch
    from dispatch.services.worker import operation_execute

    proposal, _ = live.approved_email(to=["x@lose-response.test"])
    operation = operation_execute(operation_id=proposal_dispatch(
        principal=live.owner, proposal_id=proposal.id, now=live.now, enqueue=False).id)
    page = as_user("admin", "admin-pw").get(f"/console/operations/{operation.id}/")
    body = page.content.decode()
    assert "Request a renewed approval" not in body
    # The sink neither deduplicates nor can prove an email absent: a human resolves it.
    assert "Not available: The outcome is uncertain and the operation is not safe to retry" \
        in body
    assert "the destination does not deduplicate and its lookups cannot prove" in body
