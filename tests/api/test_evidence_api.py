"""`GET evidence/{id}/` and `GET attestations/{id}/` (docs/design.md#evidence): tenant-scoped reads
of what only the dispatcher issues; nothing creates either over the API."""

from __future__ import annotations

import pytest

from dispatch.models import Attestation, Receipt
from dispatch.services.principals import token_issue
from tests.api.conftest import Caller, assert_error
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.research import Researcher

pytestmark = pytest.mark.django_db


@pytest.fixture
def chain(live: World, destinations: Destinations) -> tuple[Researcher, str, str]:
    researcher = Researcher.enrol(live, destinations.sources_url)
    report, attestation = researcher.attested_report()
    receipt = report.revisions.get(number=1).payload["citations"][0]["receipt"]
    return researcher, receipt, attestation


def caller(client: object, principal: object) -> Caller:
    return Caller(client, token_issue(principal=principal))  # type: ignore[arg-type]


def test_a_receipt_and_an_attestation_read_as_design_11_shows_them(
    client: object, chain: tuple[Researcher, str, str],
) -> None:
    researcher, receipt_id, attestation_id = chain
    agent = caller(client, researcher.agent)

    receipt = agent.get(f"evidence/{receipt_id}/")
    assert receipt.status_code == 200
    stored = Receipt.objects.get(id=receipt_id)
    assert receipt.json() == {
        "id": receipt_id, "question": {"id": stored.question_id, "revision": 1},
        "source": stored.source, "content_digest": stored.content_digest,
        "retrieved_at": receipt.json()["retrieved_at"], "operation_id": stored.operation_id}

    attestation = agent.get(f"attestations/{attestation_id}/").json()
    issued = Attestation.objects.get(id=attestation_id)
    assert attestation["report"] == {"id": issued.report_id, "revision": 1,
                                     "digest": issued.report_digest}
    assert (attestation["validator"], attestation["policy"], attestation["result"]) == (
        "cited-sources@1", "cited-sources/1", "pass")
    assert attestation["evidence"] == issued.evidence and attestation["findings"] == []
    # A human of the tenant reads them too (the console's approval page shows them).
    operator = caller(client, researcher.world.approver)
    assert operator.get(f"attestations/{attestation_id}/").status_code == 200


@pytest.mark.parametrize("path", ["evidence/{r}/", "attestations/{a}/"])
def test_another_tenant_and_a_forged_id_are_not_found_alike(
    client: object, chain: tuple[Researcher, str, str], path: str,
) -> None:
    researcher, receipt_id, attestation_id = chain
    outsider = caller(client, researcher.world.outsider)
    assert_error(outsider.get(path.format(r=receipt_id, a=attestation_id)), 404, "not_found")
    agent = caller(client, researcher.agent)
    for forged in ("evr_forged", "att_forged", "x" * 300):
        assert_error(agent.get(path.format(r=forged, a=forged)), 404, "not_found")


@pytest.mark.parametrize("path", ["evidence/", "attestations/", "evidence/{r}/",
                                  "attestations/{a}/"])
def test_nothing_creates_a_receipt_or_an_attestation_over_the_api(
    client: object, chain: tuple[Researcher, str, str], path: str,
) -> None:
    researcher, receipt_id, attestation_id = chain
    agent = caller(client, researcher.agent)
    before = (Receipt.objects.count(), Attestation.objects.count())
    response = agent.post(path.format(r=receipt_id, a=attestation_id), {
        "id": "att_mine", "result": "pass", "report": {"id": "res_x", "revision": 1}})
    assert response.status_code in (404, 405), response.content
    assert (Receipt.objects.count(), Attestation.objects.count()) == before
    # Nor does a resource of a kind named so.
    made = agent.post("resources/", {"kind": "attestation", "payload": {"result": "pass"}})
    assert_error(made, 422, "schema_invalid")
