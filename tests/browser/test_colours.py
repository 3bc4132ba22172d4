"""A colour scale where red means "look here": a large amount, a new
recipient and a stale proposal are red; effect classes (`external_write`, `financial_write`),
which every email and payment has, are neutral, so that red on the queue stays rare."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from dispatch.services.resources import revision_create
from tests.conftest import World
from tests.support.quorum import four_eyes

__all__ = ["four_eyes"]

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("four_eyes")]

RED = "rgb(160, 28, 28)"  # --bad


def hue(locator: Any) -> str:
    return str(locator.evaluate("(el) => getComputedStyle(el).backgroundColor"))


def reddish(rgb: str) -> bool:
    red, green, blue = (int(part) for part in rgb[rgb.index("(") + 1:rgb.index(")")]
                        .split(",")[:3])
    return red > 150 and red - max(green, blue) > 60


def test_red_marks_risk_and_change_not_effect_classes(
        world: World, page: Any, login: Any) -> None:
    large = world.propose_transfer("25000.00")
    small = world.propose_transfer("12.00")
    draft = world.draft()
    world.propose_email(draft)
    draft, _ = revision_create(principal=world.owner, resource_id=draft.id, base_revision=1,
                               payload={**draft.revisions.get(number=1).payload,
                                        "cc": ["exfil@evil.example"]}, now=world.now)
    world.propose_email(draft)
    login("approver", "approver-pw")

    def row(proposal: Any) -> Any:
        return page.locator("tr", has=page.locator(f"#q-{proposal.approval.id}"))

    for effect in row(small).locator(".badge-external-write, .badge-financial-write").all():
        assert not reddish(hue(effect)), hue(effect)
    expect(row(small).locator(".badge-external-write")).to_have_count(1)
    expect(row(large).locator(".badge-large")).to_have_css("background-color", RED)
    expect(page.locator(".change-recipient")).to_have_css("background-color", RED)
    stale = page.locator(".badge-stale").first
    assert reddish(stale.evaluate("(el) => getComputedStyle(el).color"))
    # On the page, the same: the effect beside the sentence is a neutral fact.
    page.goto(f"/console/approvals/{small.approval.id}/")
    effect = page.locator(".page-head .headline .badge-financial-write")
    expect(effect).to_have_count(1)
    assert not reddish(hue(effect)), hue(effect)
