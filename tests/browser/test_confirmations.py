"""Risky clicks ask first, in Chromium: approving a large amount and revoking a grant with its
delegations each name what will happen, and cancelling sends nothing. A denial's banner is not
an approval's."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from dispatch.models import ApprovalRequest, Grant
from dispatch.services.authority import grant_delegate
from dispatch.services.principals import agent_create
from tests.conftest import World
from tests.support.quorum import four_eyes, second_operator

__all__ = ["four_eyes"]

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def state_of(proposal: Any) -> str:
    return ApprovalRequest.objects.get(id=proposal.approval.id).state


def decisions_posted(page: Any) -> list[str]:
    """Every POST of a decision the page sends, as it sends it."""
    posted: list[str] = []
    page.on("request", lambda request: posted.append(request.url)
            if request.method == "POST" and request.url.endswith("/decide/") else None)
    return posted


@pytest.mark.usefixtures("four_eyes")  # large by the deployment's rule: two operators
def test_a_large_amount_asks_before_approving(world: World, page: Any, login: Any) -> None:
    proposal = world.propose_transfer(amount="99999.99", memo="urgent wire")
    world.grant(proposal, approver=second_operator())  # the other operator approved first
    login("approver", "approver-pw")
    page.goto(f"/console/approvals/{proposal.approval.id}/")
    posted = decisions_posted(page)
    asked: list[str] = []

    def dismiss(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    assert len(asked) == 1
    assert "€99,999.99 from acct-001 to acct-999" in asked[0]
    assert "mints a one-shot permit" in asked[0]
    assert state_of(proposal) == "pending"

    def accept(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Approved. Permit")).to_be_visible()
    assert state_of(proposal) == "granted"
    assert len(asked) == 2
    assert len(posted) == 1  # the dismissed click sent nothing


def test_a_small_amount_approves_without_asking(world: World, page: Any, login: Any) -> None:
    proposal = world.propose_transfer(amount="42")
    login("approver", "approver-pw")
    page.goto(f"/console/approvals/{proposal.approval.id}/")
    asked: list[str] = []
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Approved. Permit")).to_be_visible()
    assert asked == []
    assert state_of(proposal) == "granted"


def test_revoking_a_grant_asks_and_names_its_delegations(
    world: World, page: Any, login: Any,
) -> None:
    root = next(g for g in Grant.objects.filter(subject=world.owner)
                if g.operations == ["payments.transfer"])
    helper, _ = agent_create(name="helper", tenant="acme", tools=["payments.transfer"])
    agent_create(name="helper-2", tenant="acme", tools=["payments.transfer"])
    child = grant_delegate(actor=world.owner, grant_id=root.id, subject_name="helper",
                           operations=["payments.transfer"], scope={"account": ["acct-001"]},
                           expires_at=None, now=world.now)
    grandchild = grant_delegate(actor=helper, grant_id=child.id, subject_name="helper-2",
                                operations=["payments.transfer"],
                                scope={"account": ["acct-001"]}, expires_at=None, now=world.now)
    login("admin", "admin-pw")
    page.goto("/console/grants/")
    revoke = page.get_by_role("button", name=f"Revoke {root.id} of owner and its delegations")
    asked: list[str] = []

    def answer(accept: bool) -> Any:
        def handle(dialog: Any) -> None:
            asked.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()
        return handle

    page.once("dialog", answer(False))
    revoke.click()
    expect(revoke).to_be_visible()
    assert asked == [f"Revoke grant {root.id} of owner and the 2 grants delegated from it? "
                     "Unused permits resting on them are revoked too."]
    assert Grant.objects.filter(id__in=[root.id, child.id, grandchild.id],
                                revoked_at__isnull=False).count() == 0

    page.once("dialog", answer(True))
    revoke.click()
    expect(page.get_by_role("status")).to_have_text(
        f"Revoked {root.id} and every grant delegated from it.")
    assert Grant.objects.filter(id__in=[root.id, child.id, grandchild.id],
                                revoked_at__isnull=False).count() == 3


def test_a_grant_without_delegations_asks_about_itself(
    world: World, page: Any, login: Any,
) -> None:
    grant = next(g for g in Grant.objects.filter(subject=world.owner)
                 if g.operations == ["crm.lookup"])
    login("admin", "admin-pw")
    page.goto("/console/grants/")
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.get_by_role("button", name=f"Revoke {grant.id} of owner", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text(f"Revoked {grant.id}")
    assert asked == [f"Revoke grant {grant.id} of owner? Unused permits resting on it are "
                     "revoked too."]


def test_a_denial_banner_is_not_an_approval_banner(world: World, page: Any, login: Any) -> None:
    denied = world.propose_transfer(amount="99999.99")
    approved = world.propose_transfer(amount="42")
    login("approver", "approver-pw")
    page.goto(f"/console/approvals/{denied.approval.id}/")
    asked: list[str] = []
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.get_by_label("Reason").fill("Not an invoice we know")
    page.get_by_role("button", name="Deny").click()  # denying a large amount needs no question
    banner = page.get_by_role("status")
    expect(banner).to_have_text("Denied. The action will not run.")
    expect(banner).to_have_class("alert alert-info alert-denied")
    denied_colour = banner.evaluate("node => getComputedStyle(node).backgroundColor")
    assert state_of(denied) == "denied"
    assert asked == []

    page.goto(f"/console/approvals/{approved.approval.id}/")
    page.get_by_role("button", name="Approve").click()
    banner = page.get_by_role("status")
    expect(banner).to_contain_text("Approved. Permit")
    expect(banner).to_have_class("alert alert-success")
    # and they look different: the denial's banner is not the approval's green
    assert banner.evaluate("node => getComputedStyle(node).backgroundColor") != denied_colour
