"""The runnable example of the evidence chain (docs/design.md#evidence), end to end against real
destinations: two fetches, a report citing them, a passing attestation, a fabricated report the
validator fails, and a publication that waits for an operator, then is published once."""

from __future__ import annotations

import io

import pytest
from django.utils import timezone

from demo import research_example
from demo.destinations.runner import list_all
from dispatch.models import Attestation, Proposal, Receipt, Resource
from dispatch.services.approvals import approval_decide
from tests.conftest import World
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db


def test_the_example_publishes_the_attested_report_after_an_operator_approves(
    live: World, destinations: Destinations,
) -> None:
    agent = research_example.enrol()
    assert research_example.enrol() == agent  # idempotent: run again, the same agent
    out = io.StringIO()

    first = research_example.run(agent, destinations.sources_url, inline=True, out=out)

    assert first.state == "waiting"
    assert [o.status for o in first.outcomes] == ["completed"] * 7
    assert Receipt.objects.count() == 2
    passed, failed = Attestation.objects.order_by("issued_at", "id")
    assert (passed.result, failed.result) == ("pass", "fail")
    assert failed.findings == [{"citation": 1, "message": (
        f"citation 2: quote not found in source {destinations.sources_url}/lighthouses "
        f"(receipt {failed.evidence[1]})")}]
    assert "quote not found" in out.getvalue()
    assert list_all(destinations.directory)["publications"] == []  # waits for an operator

    report = Resource.objects.get(id=passed.report_id)
    assert report.state == "proposed"
    publication = Proposal.objects.get(operation="report.publish")
    approval_decide(approver=live.approver, approval_id=publication.approval.id,
                    decision="grant", digest=publication.digest, now=timezone.now())
    done = research_example.run(agent, destinations.sources_url,
                                execution_id=first.execution_id, inline=True, out=out)

    assert done.state == "finished"
    assert done.outcomes[-1].status == "completed"
    (published,) = list_all(destinations.directory)["publications"]
    assert (published["report_id"], published["revision"]) == (report.id, 1)
    assert Resource.objects.get(id=report.id).state == "published"
    assert "finished: Published the attested report" in out.getvalue()
