"""The evidence chain in the console (docs/design.md#evidence): a publication's
approval page shows the report as text, each citation beside its receipt and the attestation, and
refuses to offer a grant the attestation check would refuse; a question's page shows its chain
as a timeline, to its own tenant only."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest

from dispatch.models import (
    ApprovalRequest,
    Attestation,
    Permit,
    Proposal,
    Receipt,
    ReceiptContent,
    Resource,
)
from tests.conftest import World
from tests.console.conftest import Browser, text
from tests.support.destinations import Destinations
from tests.support.research import BEES_QUOTE, BEES_QUOTE_2, Researcher, report_payload

pytestmark = pytest.mark.django_db
T = TypeVar("T")

FINDINGS = [
    {"citation": 1, "message": "citation 2: quote not found in source (receipt evr_x)"},
    {"citation": None, "message": "the report cites fewer than two receipts that hold"},
]


@pytest.fixture
def researcher(live: World, destinations: Destinations) -> Researcher:
    return Researcher.enrol(live, destinations.sources_url)


@pytest.fixture
def publication(researcher: Researcher) -> Proposal:
    report, attestation_id = researcher.attested_report()
    return researcher.propose_publication(report, attestation_id)


def page_url(proposal: Proposal) -> str:
    return f"/console/approvals/{proposal.approval.id}/"


def question_url(question_id: str) -> str:
    return f"/console/questions/{question_id}/"


def cited(proposal: Proposal) -> list[Receipt]:
    """The receipts the proposal's report revision cites, in citation order."""
    ref = proposal.arguments["report"]
    report = Resource.objects.get(id=ref["id"])
    ids = [c["receipt"] for c in report.revisions.get(number=ref["revision"]).payload[
        "citations"]]
    found = {r.id: r for r in Receipt.objects.filter(id__in=ids)}
    return [found[i] for i in ids]


def attestation_of(proposal: Proposal) -> Attestation:
    return Attestation.objects.get(id=proposal.arguments["attestation"])


def question_of(proposal: Proposal) -> str:
    return cited(proposal)[0].question_id


def visible_text(body: str) -> str:
    """What a reader sees: the page without its tags, attributes and entities."""
    return html.unescape(re.sub(r"<[^>]+>", "", body))


def section(body: str, section_id: str) -> str:
    start = body.index(f'id="{section_id}"')
    return body[start:body.index("</section>", start)]


def test_the_page_renders_the_report_and_each_citation_beside_its_receipt(
    publication: Proposal, operator: Browser,
) -> None:
    response = operator.get(page_url(publication))
    body = text(response)
    assert response.status_code == 200
    assert '<h3 class="report-heading">How bees share where the flowers are</h3>' in body
    assert "<p>Foragers dance to show the way; the colony has one queen.</p>" in body
    citations = section(body, "citations-title")
    for number, (receipt, quote) in enumerate(zip(cited(publication), (BEES_QUOTE, BEES_QUOTE_2),
                                                  strict=True), start=1):
        item = citations[citations.index(f'id="citation-{number}"'):]
        item = item[:item.index("</li>")]
        assert quote in item
        assert receipt.id in item
        assert receipt.source in item
        assert receipt.content_digest in item
        assert f"{receipt.retrieved_at:%Y-%m-%d %H:%M:%S} UTC" in item
    assert "No receipt" not in body
    assert f'href="{question_url(question_of(publication))}"' in body
    assert 'name="decision" value="grant"' in body


def test_the_report_is_text_escaped_in_paragraphs(
    researcher: Researcher, operator: Browser,
) -> None:
    from dispatch.services.resources import resource_create

    question = researcher.question()
    citations = [(researcher.receipt_id(question, "bees"), BEES_QUOTE),
                 (researcher.receipt_id(question, "bees"), BEES_QUOTE_2)]
    payload = report_payload(question, citations, title="Bees <b>dance</b> & tell")
    payload["body"] = "Foragers <img src=x onerror=alert(1)> dance.\n\nThe colony\nhas one queen."
    report, _ = resource_create(principal=researcher.agent, kind="report", payload=payload,
                                now=researcher.world.now)
    proposal = researcher.propose_publication(report, researcher.attestation_id(report))
    body = text(operator.get(page_url(proposal)))
    article = body[body.index('<article class="report-text"'):body.index("</article>")]
    assert "Bees &lt;b&gt;dance&lt;/b&gt; &amp; tell</h3>" in article
    assert "<p>Foragers &lt;img src=x onerror=alert(1)&gt; dance.</p>" in article
    assert "<p>The colony<br>has one queen.</p>" in article
    assert "<img" not in article


def test_the_attestation_is_named_a_judgement_never_a_verification(
    publication: Proposal, operator: Browser,
) -> None:
    attestation = attestation_of(publication)
    body = text(operator.get(page_url(publication)))
    box = section(body, "attestation")
    assert "attestation-fail" not in box
    for value in (attestation.id, "cited-sources@1", "cited-sources/1",
                  f"{attestation.issued_at:%Y-%m-%d %H:%M:%S} UTC",
                  "None: the validator recorded no finding."):
        assert value in box, value
    assert ("The recorded judgement of validator cited-sources@1 under policy "
            "cited-sources/1, not a verification") in " ".join(visible_text(box).split())
    assert "verified" not in visible_text(body).lower()


@pytest.mark.parametrize("how", ["deleted", "another tenant's"])
def test_a_citation_whose_receipt_the_tenant_lacks_is_shown_as_missing(
    publication: Proposal, operator: Browser, world: World, how: str,
) -> None:
    kept, gone = cited(publication)
    if how == "deleted":
        ReceiptContent.objects.filter(receipt_id=gone.id).delete()
        Receipt.objects.filter(id=gone.id).delete()
    else:
        Receipt.objects.filter(id=gone.id).update(tenant_id=world.outsider.tenant_id)
    response = operator.get(page_url(publication))
    body = text(response)
    assert response.status_code == 200
    item = body[body.index('id="citation-2"'):]
    item = item[:item.index("</li>")]
    assert "citation-problem" in body[body.index('id="citation-2"') - 60:]
    assert f'<strong>No receipt</strong> <span class="mono">{gone.id}</span> exists' in item
    assert gone.source not in item
    assert BEES_QUOTE_2 in item
    assert kept.source in body  # the other citation keeps its receipt


def test_a_failing_attestation_is_red_with_its_findings_and_offers_no_approve(
    publication: Proposal, operator: Browser,
) -> None:
    Attestation.objects.filter(id=attestation_of(publication).id).update(
        result="fail", findings=FINDINGS)
    body = text(operator.get(page_url(publication)))
    box = section(body, "attestation")
    assert 'class="card attestation attestation-fail"' in body
    assert '<span class="badge badge-attestation-fail">fail</span>' in box
    assert ('<a class="citation-ref" href="#citation-2" aria-label="Citation 2" '
            'title="Citation 2">2</a> citation 2: quote not found') in box
    assert '<span class="citation-ref citation-ref-report">report</span> the report cites' in box
    assert "attestation_failed" in box
    # The finding sits beside the citation it names, too.
    assert '<li class="citation citation-problem" id="citation-2">' in body
    assert "Finding: citation 2: quote not found" in body
    assert 'name="decision" value="grant"' not in body
    assert 'name="decision" value="deny"' in body
    assert "This publication cannot be approved." in body
    assert "failed with 2 findings" in body


def test_a_grant_of_a_failing_attestation_is_refused_on_the_page(
    publication: Proposal, operator: Browser,
) -> None:
    operator.get(page_url(publication))  # loaded while the attestation still passed
    Attestation.objects.filter(id=attestation_of(publication).id).update(
        result="fail", findings=FINDINGS)
    response = operator.post(f"/console/approvals/{publication.approval.id}/decide/", {
        "digest": publication.digest, "decision": "grant", "reason": ""})
    body = text(response)
    assert response.status_code == 403
    refusal = body[body.index('id="refusal"'):]
    assert "The attestation this publication rests on failed: it cannot be approved." in refusal
    assert "The validator failed this report" in refusal
    assert "attestation_failed" in refusal
    assert ApprovalRequest.objects.get(id=publication.approval.id).state == "pending"
    assert not Permit.objects.filter(proposal_id=publication.id).exists()
    # Deny stays open, with a reason.
    response = operator.post(f"/console/approvals/{publication.approval.id}/decide/", {
        "digest": publication.digest, "decision": "deny", "reason": "The quote is not there"})
    assert response.status_code == 302
    assert ApprovalRequest.objects.get(id=publication.approval.id).state == "denied"


def test_an_email_approval_has_no_evidence_section(world: World, operator: Browser) -> None:
    body = text(operator.get(page_url(world.propose_email(world.draft()))))
    assert 'id="attestation"' not in body
    assert 'id="citations-title"' not in body
    assert 'name="decision" value="grant"' in body


def test_the_question_page_shows_its_chain_as_a_timeline(
    researcher: Researcher, operator: Browser, admin: Browser,
) -> None:
    def step(result: T) -> T:
        # The world's clock follows the real one, which stamps receipts and attestations.
        researcher.world.now = datetime.now(UTC)
        return result

    question = step(researcher.question())
    tides = step(researcher.receipt_id(question, "tides"))
    failing = step(researcher.report(question, [(tides, "The Moon is made of green cheese")]))
    failed = step(researcher.attest(failing)).result["attestation"]["id"]  # type: ignore[index]
    bees = step(researcher.receipt_id(question, "bees"))
    again = step(researcher.receipt_id(question, "bees"))
    report = step(researcher.report(question, [(bees, BEES_QUOTE), (again, BEES_QUOTE_2)]))
    attestation_id = step(researcher.attestation_id(report))
    proposal = step(researcher.propose_publication(report, attestation_id))
    step(researcher.world.grant(proposal))
    operation = step(researcher.run(proposal))

    response = operator.get(question_url(question.id))
    body = text(response)
    assert response.status_code == 200
    assert "How do bees share where flowers are?" in body
    assert '<span class="tag">bees</span>' in body
    assert '<span class="badge badge-answered">answered</span>' in body
    assert "3 receipts · 2 reports · 2 attestations · 1 publication" in body
    chain = section(body, "chain-title")
    steps = ["Revision 1 of the question", tides, failing.id, failed, bees, again, report.id,
             attestation_id, proposal.id, operation.id]
    positions = [chain.index(step) for step in steps]
    assert positions == sorted(positions), steps
    for receipt in Receipt.objects.filter(question_id=question.id):
        assert receipt.source in chain
        assert receipt.content_digest in chain
    assert "quote not found in source" in chain  # the failing attestation's finding
    assert '<li class="chain-fail">' in chain
    assert '<span class="badge badge-completed">completed</span>' in chain
    assert f'href="/console/approvals/{proposal.approval.id}/"' in chain
    assert f'href="/console/operations/{operation.id}/"' not in chain  # admins' pages
    assert "verified" not in visible_text(body).lower()
    admin_chain = text(admin.get(question_url(question.id)))
    assert f'href="/console/operations/{operation.id}/"' in admin_chain


def test_the_question_page_is_its_tenants_operators_only(
    publication: Proposal, as_user: Callable[[str, str], Browser], operator: Browser,
) -> None:
    question_id = question_of(publication)
    assert operator.get(question_url(question_id)).status_code == 200
    outsider = as_user("outsider-operator", "pw")
    response = outsider.get(question_url(question_id))
    assert response.status_code == 404
    assert question_id not in text(response)
    for other in (publication.arguments["report"]["id"], "res_missing", "x" * 300):
        assert operator.get(question_url(other)).status_code == 404


def test_the_question_page_needs_an_operator(
    publication: Proposal, as_user: Callable[[str, str], Browser],
) -> None:
    from dispatch.services.principals import human_create

    human_create(name="viewer", tenant="acme", role="none", password="pw")
    assert as_user("viewer", "pw").get(question_url(question_of(publication))).status_code \
        == 403
    anonymous = Browser()
    response = anonymous.get(question_url(question_of(publication)))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_the_pages_take_a_bounded_number_of_queries(
    publication: Proposal, researcher: Researcher, operator: Browser,
    django_assert_num_queries: Any,
) -> None:
    """One query per kind of record, however many citations or steps: session, user and
    principal, then the page's own (the approval page's include its resources' lineage, for
    the changed and stale flags); the same count with one report as with three."""
    question_id = question_of(publication)
    with django_assert_num_queries(12):
        assert operator.get(page_url(publication)).status_code == 200
    with django_assert_num_queries(9):
        assert operator.get(question_url(question_id)).status_code == 200
    question = Resource.objects.get(id=question_id)
    for _ in range(2):  # two more reports on the question, each with receipts and attestation
        report, attestation = researcher.attested_report(question)
        researcher.propose_publication(report, attestation)
    with django_assert_num_queries(9):
        assert operator.get(question_url(question_id)).status_code == 200


def test_a_question_longer_than_the_chain_limit_shows_its_current_text_and_newest_events(
    researcher: Researcher, operator: Browser, settings: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dispatch.selectors.evidence as chains

    monkeypatch.setattr(chains, "CHAIN_LIMIT", 3)
    question = researcher.question()
    for number in range(2, 6):
        question = researcher.revise_question(question, f"Wording number {number}?")
    response = operator.get(question_url(question.id))
    body = text(response)
    assert response.status_code == 200
    assert "Wording number 5?" in body  # the current revision, though 5 > the limit of 3
    chain = section(body, "chain-title")
    assert "Revision 5 of the question" in chain and "Revision 1 of the question" not in chain
    assert "only the newest 3 are shown" in body
