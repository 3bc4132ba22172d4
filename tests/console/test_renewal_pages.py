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
    assert "Open the renewed approval to decide" in page
    assert f'href="/console/renewals/{renewal.id}/"' in page
    page = second.get(f"/console/renewals/{renewal.id}/").content.decode()
    assert f"Approve attempt {renewal.attempt}" in page
    response = second.post(f"/console/renewals/{renewal.id}/decide/",
                           {"decision": "grant", "digest": renewal.digest, "reason": ""})
    assert response.status_code == 302
    assert response["Location"] == f"/console/renewals/{renewal.id}/"
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


def test_a_renewal_reaches_the_operators_queue_and_its_decision_page(
    live: World, as_user: Callable[[str, str], Browser],
) -> None:
    """The demo's flow: an admin asks, an operator (not the requester) finds it in the queue,
    opens its page and approves it there."""
    from datetime import timedelta

    from django.utils import timezone

    from dispatch.services.renewals import operation_reauthorize

    operation = stopped_transfer(live)
    renewal = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                    now=timezone.now() - timedelta(seconds=1),
                                    reason="the bank was down")
    operator = as_user("approver", "approver-pw")
    queue = operator.get("/console/").content.decode()
    assert f'href="/console/renewals/{renewal.id}/"' in queue
    assert "payments.transfer: attempt 2" in queue
    # The requester's queue does not offer it: nobody decides what they asked for.
    assert renewal.id not in as_user("admin", "admin-pw").get("/console/").content.decode()

    page = operator.get(f"/console/renewals/{renewal.id}/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "Approve attempt 2" in body
    assert "to_account" in body and "acct-999" in body  # every field of the action
    assert "Timeline" not in body  # the audit stays the admins'
    response = operator.post(f"/console/renewals/{renewal.id}/decide/",
                             {"decision": "grant", "digest": renewal.digest, "reason": ""})
    assert response.status_code == 302
    assert Renewal.objects.get(id=renewal.id).state == "granted"
    after = operator.get(response["Location"]).content.decode()
    assert "Approved" in after and "Approve attempt" not in after
    assert renewal.id not in operator.get("/console/").content.decode()


def test_another_tenants_operator_finds_no_renewal(
    live: World, as_user: Callable[[str, str], Browser],
) -> None:
    from dispatch.services.renewals import operation_reauthorize
    from tests.db.test_renewals import LATER

    operation = stopped_transfer(live)
    renewal = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                    now=live.now + LATER)
    outsider = as_user("outsider-operator", "pw")
    assert outsider.get(f"/console/renewals/{renewal.id}/").status_code == 404
    assert renewal.id not in outsider.get("/console/").content.decode()
    response = outsider.post(f"/console/renewals/{renewal.id}/decide/",
                             {"decision": "grant", "digest": renewal.digest, "reason": ""})
    assert response.status_code == 404
    assert Renewal.objects.get(id=renewal.id).state == "pending"


def test_resolving_shows_the_banner_and_the_renewal_withdrawn(
    live: World, as_user: Callable[[str, str], Browser],
) -> None:
    from dispatch.services.renewals import operation_reauthorize
    from tests.db.test_renewals import LATER

    operation = stopped_transfer(live)
    renewal = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                    now=live.now + LATER)
    admin = as_user("admin", "admin-pw")
    admin.get(f"/console/operations/{operation.id}/")
    response = admin.post(f"/console/operations/{operation.id}/resolve/",
                          {"outcome": "completed", "evidence": "the bank shows it"})
    assert response.status_code == 302
    listing = admin.get(response["Location"]).content.decode()
    assert "Recorded as completed: the effect happened." in listing
    assert f"Its pending renewal of attempt {renewal.attempt} was withdrawn" in listing
    page = as_user("approver", "approver-pw").get(
        f"/console/renewals/{renewal.id}/").content.decode()
    assert "Withdrawn" in page
    assert "an admin recorded the operation as completed" in page
    assert "Approve attempt" not in page and "<form" not in page.split("Decision")[1]
    operation_page = admin.get(f"/console/operations/{operation.id}/").content.decode()
    assert f"Attempt {renewal.attempt}: withdrawn when the operation was resolved" \
        in operation_page
