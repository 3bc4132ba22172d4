"""A publication's approval in Chromium (docs/design.md#evidence): the operator
reads the report as text, each citation beside its receipt, and the attestation as one validator's
recorded judgement; approves; and the publication leaves the queue."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from dispatch.models import ApprovalRequest, Attestation, Receipt
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.research import BEES_QUOTE, BEES_QUOTE_2, Researcher

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_approve_a_publication_on_its_evidence(
    live: World, destinations: Destinations, page: Any, login: Any, screenshot: Any,
) -> None:
    researcher = Researcher.enrol(live, destinations.sources_url)
    question = researcher.question()
    report, attestation_id = researcher.attested_report(question)
    proposal = researcher.propose_publication(report, attestation_id)
    other = live.propose_email(live.draft())
    receipts = {r.id: r for r in Receipt.objects.filter(question_id=question.id)}
    attestation = Attestation.objects.get(id=attestation_id)

    login("approver", "approver-pw")
    page.locator(f"#q-{proposal.approval.id}").click()
    page.wait_for_url(f"**/console/approvals/{proposal.approval.id}/")

    text = page.locator("article.report-text")
    expect(text.get_by_role("heading", name="How bees share where the flowers are")).to_be_visible()
    expect(text).to_contain_text("Foragers dance to show the way; the colony has one queen.")
    cited = report.revisions.get(number=1).payload["citations"]
    for number, (citation, quote) in enumerate(zip(cited, (BEES_QUOTE, BEES_QUOTE_2),
                                                   strict=True), start=1):
        receipt = receipts[citation["receipt"]]
        item = page.locator(f"#citation-{number}")
        expect(item.locator("blockquote")).to_have_text(quote)
        beside = item.locator(".citation-receipt")
        for value in (receipt.id, receipt.source, receipt.content_digest,
                      f"{receipt.retrieved_at:%Y-%m-%d %H:%M:%S} UTC"):
            expect(beside).to_contain_text(value)
    box = page.locator("#attestation")
    expect(box).to_contain_text(
        "The recorded judgement of validator cited-sources@1 under policy cited-sources/1, "
        "not a verification")
    expect(box).to_contain_text(attestation.id)
    expect(box).to_contain_text("None: the validator recorded no finding.")
    expect(page.locator("main")).not_to_contain_text("verified")
    expect(page.get_by_role("link", name="“How do bees share where flowers are?”")).to_be_visible()
    # The report, its attestation and its citations with their receipts, in one view.
    page.set_viewport_size({"width": 1360, "height": 1280})
    screenshot("publication", full_page=False)

    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Approved. Permit")).to_be_visible()
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "granted"
    page.get_by_role("navigation", name="Console").get_by_role("link", name="Approvals").click()
    expect(page.locator(f"#q-{other.approval.id}")).to_be_visible()
    expect(page.locator(f"#q-{proposal.approval.id}")).to_have_count(0)

    page.goto(f"/console/questions/{question.id}/")
    chain = page.locator("ol.chain")
    expect(chain).to_contain_text(attestation.id)
    expect(chain).to_contain_text(proposal.id)
