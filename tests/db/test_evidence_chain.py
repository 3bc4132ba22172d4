"""The evidence chain through the real services and destinations (docs/design.md#evidence): receipts
and attestations are issued by the dispatcher alone, in the outcome's transaction; a publication
rests on a passing attestation of the exact report revision, checked at proposal and again at
dispatch, and the publisher holds nothing for any refusal."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from demo.destinations.runner import list_all
from demo.destinations.sources import replace_source
from dispatch.models import Attestation, AuditEvent, Operation, Permit, Receipt, Resource
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.reconciliation import reconcile_operations
from dispatch.services.worker import operation_execute
from protocols.canonical import digest_bytes
from protocols.denials import Denial, DenialCode
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.research import (
    BEES_QUOTE,
    BEES_QUOTE_2,
    TIDES_QUOTE,
    Researcher,
    ref,
    report_payload,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def researcher(live: World, destinations: Destinations) -> Researcher:
    return Researcher.enrol(live, destinations.sources_url)


def refused(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Denial:
    with pytest.raises(Denial) as caught:
        call(*args, **kwargs)
    return caught.value


def publications(destinations: Destinations) -> list[dict[str, Any]]:
    return list_all(destinations.directory)["publications"]


def reloaded(resource: Resource) -> Resource:
    return Resource.objects.get(id=resource.id)


def test_a_fetch_issues_a_receipt_over_the_exact_bytes(
    researcher: Researcher, destinations: Destinations,
) -> None:
    question = researcher.question()
    operation = researcher.fetch(question, "bees")

    assert operation.state == "completed"
    result: dict[str, Any] = operation.result  # type: ignore[assignment]
    receipt = Receipt.objects.get(operation_id=operation.id)
    served = {s["url"]: s["digest"] for s in list_all(destinations.directory)["sources"]}
    assert result["receipt"] == {
        "id": receipt.id, "question": {"id": question.id, "revision": 1},
        "source": researcher.source("bees"), "content_digest": served[receipt.source],
        "retrieved_at": result["receipt"]["retrieved_at"], "operation_id": operation.id}
    assert receipt.content_digest == digest_bytes(result["content"].encode())
    assert bytes(receipt.content.content) == result["content"].encode()
    assert reloaded(question).state == "open"  # researched while open
    issued = AuditEvent.objects.get(kind="receipt.issued")
    assert issued.details["receipt_id"] == receipt.id
    assert "waggle" not in json.dumps(issued.details)  # ids and digests, never the bytes


def test_the_whole_chain_publishes_the_exact_attested_report_once(
    researcher: Researcher, destinations: Destinations,
) -> None:
    question = researcher.question()
    report, attestation_id = researcher.attested_report(question)
    attestation = Attestation.objects.get(id=attestation_id)
    assert (attestation.result, attestation.findings) == ("pass", [])
    assert (attestation.validator, attestation.policy) == ("cited-sources@1", "cited-sources/1")
    assert reloaded(report).state == "attested"

    proposal = researcher.propose_publication(report, attestation_id)
    assert reloaded(report).state == "proposed"
    assert publications(destinations) == []  # it waits for an operator
    researcher.world.grant(proposal)
    operation = researcher.run(proposal)

    assert operation.state == "completed"
    (published,) = publications(destinations)
    assert (published["key"], published["report_id"], published["revision"]) == (
        operation.id, report.id, 1)
    assert published["digest"] == attestation.report_digest
    assert reloaded(report).state == "published"
    assert reloaded(question).state == "answered"
    kinds = set(AuditEvent.objects.values_list("kind", flat=True))
    assert {"receipt.issued", "attestation.issued", "operation.completed"} <= kinds


def test_a_fabricated_quote_fails_with_a_finding_a_person_can_act_on(
    researcher: Researcher, destinations: Destinations,
) -> None:
    question = researcher.question()
    bees = researcher.receipt_id(question, "bees")
    tides = researcher.receipt_id(question, "tides")
    report = researcher.report(question, [(bees, BEES_QUOTE),
                                          (tides, "The Moon is made of green cheese")])
    operation = researcher.attest(report)

    assert operation.state == "completed"  # the validator ran and judged
    attestation = operation.result["attestation"]  # type: ignore[index]
    assert attestation["result"] == "fail"
    assert attestation["findings"] == [{
        "citation": 1, "message": f"citation 2: quote not found in source "
                                  f"{researcher.source('tides')} (receipt {tides})"}]
    assert reloaded(report).state == "draft"
    denial = refused(researcher.propose_publication, report, attestation["id"])
    assert denial.code is DenialCode.ATTESTATION_FAILED
    assert publications(destinations) == []


@pytest.mark.parametrize("forge", ["missing", "other_tenant"])
def test_a_receipt_the_tenant_cannot_see_does_not_exist_for_the_validator(
    researcher: Researcher, destinations: Destinations, forge: str,
) -> None:
    question = researcher.question()
    bees = researcher.receipt_id(question, "bees")
    if forge == "missing":
        cited = "evr_forged0000000000000000"
    else:
        stranger = Researcher.enrol(researcher.world, researcher.sources_url, name="stranger",
                                    tenant="globex")
        cited = stranger.receipt_id(stranger.question(), "bees")
    report = researcher.report(question, [(bees, BEES_QUOTE), (cited, BEES_QUOTE_2)])
    attestation = researcher.attest(report).result["attestation"]  # type: ignore[index]

    assert attestation["result"] == "fail"
    assert attestation["findings"][0]["message"] == f"citation 2: receipt {cited} does not exist"
    assert refused(researcher.propose_publication, report,
                   attestation["id"]).code is DenialCode.ATTESTATION_FAILED
    assert publications(destinations) == []


def test_a_receipt_of_another_question_fails_its_citation(researcher: Researcher) -> None:
    question = researcher.question()
    other = researcher.question(text="Where do bees live?")
    bees = researcher.receipt_id(question, "bees")
    elsewhere = researcher.receipt_id(other, "bees")
    report = researcher.report(question, [(bees, BEES_QUOTE), (elsewhere, BEES_QUOTE_2)])
    attestation = researcher.attest(report).result["attestation"]  # type: ignore[index]
    assert attestation["result"] == "fail"
    assert f"was issued for question {other.id}" in attestation["findings"][0]["message"]


def test_a_source_whose_bytes_change_after_the_receipt_fails_the_citation(
    researcher: Researcher, destinations: Destinations,
) -> None:
    question = researcher.question()
    bees = researcher.receipt_id(question, "bees")
    tides = researcher.receipt_id(question, "tides")
    report = researcher.report(question, [(bees, BEES_QUOTE), (tides, TIDES_QUOTE)])
    replace_source(destinations.directory, "tides", b"Tides\n\nRetracted.\n")

    attestation = researcher.attest(report).result["attestation"]  # type: ignore[index]

    assert attestation["result"] == "fail"
    (finding,) = attestation["findings"]
    assert finding["citation"] == 1
    assert "no longer match the receipt's digest" in finding["message"]


@pytest.mark.parametrize(("attestation", "code"), [
    ("att_forged000000000000000000", DenialCode.ATTESTATION_MISSING),
    ("", DenialCode.ATTESTATION_MISSING),
])
def test_an_attestation_that_was_never_issued_is_missing(
    researcher: Researcher, destinations: Destinations, attestation: str, code: DenialCode,
) -> None:
    report, _ = researcher.attested_report()
    assert refused(researcher.propose_publication, report, attestation).code is code
    assert publications(destinations) == []


def test_an_attestation_posted_as_json_is_refused_by_the_schema(researcher: Researcher) -> None:
    report, real = researcher.attested_report()
    forged = {"id": real, "result": "pass", "report": {"id": report.id, "revision": 1}}
    denial = refused(researcher.propose_publication, report, forged)
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert denial.details["errors"][0]["pointer"] == "/arguments/attestation"


def test_another_tenants_attestation_is_missing(researcher: Researcher) -> None:
    stranger = Researcher.enrol(researcher.world, researcher.sources_url, name="stranger",
                                tenant="globex")
    _, theirs = stranger.attested_report()
    report, _ = researcher.attested_report()
    denial = refused(researcher.propose_publication, report, theirs)
    assert denial.code is DenialCode.ATTESTATION_MISSING


def test_a_quote_edited_in_after_the_attestation_unbinds_it(
    researcher: Researcher, destinations: Destinations,
) -> None:
    question = researcher.question()
    report, attestation_id = researcher.attested_report(question)
    cited = [(c["receipt"], c["quote"]) for c in
             report.revisions.get(number=1).payload["citations"]]
    edited = researcher.revise(report, report_payload(
        question, [*cited, (cited[0][0], "Bees vote for the queen by dancing")]))
    assert edited.current_revision == 2 and reloaded(report).state == "draft"

    # The attestation judged revision 1: it binds nothing of revision 2 ...
    denial = refused(researcher.propose_publication, edited, attestation_id)
    assert denial.code is DenialCode.ATTESTATION_UNBOUND
    assert denial.details["field"] == "revision"
    # ... and revision 1 is no longer the report's.
    stale = refused(researcher.propose_publication,
                    Resource(id=report.id, current_revision=1), attestation_id)
    assert stale.code is DenialCode.STALE_REVISION
    assert publications(destinations) == []


def test_an_attestation_of_another_report_is_unbound(researcher: Researcher) -> None:
    question = researcher.question()
    _, attestation_id = researcher.attested_report(question)
    other, _ = researcher.attested_report(question)
    denial = refused(researcher.propose_publication, other, attestation_id)
    assert (denial.code, denial.details["field"]) == (DenialCode.ATTESTATION_UNBOUND, "report")


def test_the_attestation_is_checked_again_at_dispatch(
    researcher: Researcher, destinations: Destinations,
) -> None:
    report, attestation_id = researcher.attested_report()
    proposal = researcher.propose_publication(report, attestation_id)
    researcher.world.grant(proposal)
    # A store whose attestation no longer passes (as if it had been re-judged): the claim is
    # refused with the attestation's code, before any I/O.
    Attestation.objects.filter(id=attestation_id).update(result="fail")
    denial = refused(proposal_dispatch, principal=researcher.agent, proposal_id=proposal.id,
                     now=researcher.world.now, enqueue=False)
    assert denial.code is DenialCode.ATTESTATION_FAILED
    assert not Operation.objects.filter(proposal_id=proposal.id).exists()
    assert publications(destinations) == []


def test_a_source_off_the_allow_list_is_not_fetched(researcher: Researcher) -> None:
    question = researcher.question()
    denial = refused(researcher.propose, "research.fetch", {
        "question": ref(question), "source": "http://127.0.0.1:9/elsewhere"})
    assert denial.code is DenialCode.EFFECT_NOT_PERMITTED
    assert not Receipt.objects.exists()


def test_a_report_on_a_topic_outside_the_grant_is_refused(researcher: Researcher) -> None:
    from dispatch.services.resources import resource_create

    tides, _ = resource_create(principal=researcher.agent, kind="question",
                               payload={"topic": "tides", "text": "Why spring tides?"},
                               now=researcher.world.now)
    report = researcher.report(tides, [("evr_a", "x"), ("evr_b", "y")])
    denial = refused(researcher.propose, "evidence.attest", {"report": ref(report)})
    assert denial.code is DenialCode.SCOPE_VIOLATION


def test_a_lost_publication_is_unknown_then_reconciled_from_the_publishers_lookup(
    researcher: Researcher, destinations: Destinations, settings: Any,
) -> None:
    settings.RETRY_BACKOFF_SECONDS = 0
    question = researcher.question()
    bees = researcher.receipt_id(question, "bees")
    again = researcher.receipt_id(question, "bees")
    report = researcher.report(question, [(bees, BEES_QUOTE), (again, BEES_QUOTE_2)],
                               title="lose-response.test")
    proposal = researcher.propose_publication(report, researcher.attestation_id(report))
    researcher.world.grant(proposal)

    operation = researcher.run(proposal)
    assert operation.state == "unknown"  # every attempt lost its answer
    assert reloaded(report).state == "unknown"
    assert len(publications(destinations)) == 1  # one effect: the publisher deduplicated

    reconcile_operations(now=researcher.world.now, enqueue=False)

    settled = Operation.objects.get(id=operation.id)
    assert settled.state == "reconciled_completed"
    assert "publisher holds publication" in settled.evidence
    assert reloaded(report).state == "published"
    assert reloaded(question).state == "answered"


def test_a_receipt_or_attestation_is_issued_only_with_a_recorded_outcome(
    researcher: Researcher, destinations: Destinations,
) -> None:
    question = researcher.question()
    failed = researcher.fetch(question, "no-such-source")
    assert failed.state == "failed_no_effect"
    assert not Receipt.objects.exists()
    report = researcher.report(question, [("evr_a", "x"), ("evr_b", "y")])
    proposal = researcher.propose("evidence.attest", {"report": ref(report)})
    claimed = proposal_dispatch(principal=researcher.agent, proposal_id=proposal.id,
                                now=researcher.world.now, enqueue=False)
    assert not Attestation.objects.exists()  # claimed, not yet run
    operation_execute(operation_id=claimed.id)
    assert Attestation.objects.get().operation_id == claimed.id


def test_an_attest_under_a_policy_no_validator_serves_is_refused_at_proposal(
    researcher: Researcher,
) -> None:
    report = researcher.report(researcher.question(), [("evr_a", "x"), ("evr_b", "y")])
    denial = refused(researcher.propose, "evidence.attest",
                     {"report": ref(report), "policy": "gut-feeling/1"})
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert denial.details["errors"] == [{
        "pointer": "/arguments/policy",
        "message": "no validator serves this policy; served: ['cited-sources/1']"}]


def test_an_edit_of_the_question_during_a_fetch_leaves_its_outcome_to_be_recorded(
    researcher: Researcher,
) -> None:
    question = researcher.question()
    proposal = researcher.propose("research.fetch", {"question": ref(question),
                                                     "source": researcher.source("bees")})
    claimed = proposal_dispatch(principal=researcher.agent, proposal_id=proposal.id,
                                now=researcher.world.now, enqueue=False)
    edited = researcher.revise_question(question, "How do bees say where the flowers are?")
    assert edited.current_revision == 2

    operation = operation_execute(operation_id=claimed.id)

    assert operation.state == "completed"
    receipt = operation.result["receipt"]  # type: ignore[index]
    assert receipt["question"] == {"id": question.id, "revision": 1}  # what it was fetched for
    assert reloaded(question).state == "open"


@pytest.mark.parametrize("source", [
    "{base}.attacker.example/bees", "http://x@127.0.0.1:9/sources/bees",
    "{base}/../admin", "{base}x/bees"])
def test_a_source_that_only_looks_like_an_allowed_one_is_refused(
    researcher: Researcher, source: str,
) -> None:
    url = source.format(base=researcher.sources_url)
    denial = refused(researcher.propose, "research.fetch", {
        "question": ref(researcher.question()), "source": url})
    assert denial.code is DenialCode.EFFECT_NOT_PERMITTED


def test_an_unusable_allow_list_entry_fails_the_system_check(settings: Any) -> None:
    from django.core import checks

    settings.EVIDENCE_SOURCE_ALLOWLIST = ["https://user@docs.example.org/"]
    found = [m for m in checks.run_checks() if m.id == "dispatch.E002"]
    assert len(found) == 1 and "names credentials" in found[0].msg


def test_a_question_edited_after_the_proposal_refuses_the_grant(
    researcher: Researcher, destinations: Destinations,
) -> None:
    question = researcher.question()
    report, attestation_id = researcher.attested_report(question)
    proposal = researcher.propose_publication(report, attestation_id)
    researcher.revise_question(question, "A question the operator never saw")

    denial = refused(researcher.world.grant, proposal)

    assert (denial.code, denial.details["resource_id"]) == (DenialCode.STALE_REVISION,
                                                            question.id)
    assert not Permit.objects.filter(proposal_id=proposal.id).exists()
    assert publications(destinations) == []


def test_an_attest_whose_sources_answer_too_slowly_judges_nothing(
    researcher: Researcher, monkeypatch: pytest.MonkeyPatch, fresh_runtime: None,
) -> None:
    import time
    from dataclasses import replace

    import demo.contracts
    import demo.handlers
    from protocols.contracts import SchedulingContract

    attest = demo.contracts.evidence_attest
    monkeypatch.setitem(demo.contracts.CONTRACTS, "evidence.attest", lambda fp: replace(
        attest(fp), scheduling_contract=SchedulingContract(0.5, 1, 1)))
    question = researcher.question()
    bees = researcher.receipt_id(question, "bees")
    again = researcher.receipt_id(question, "bees")
    report = researcher.report(question, [(bees, BEES_QUOTE), (again, BEES_QUOTE_2)])
    # Each cited source answers in 0.4 s: both together overrun the 0.5 s contract timeout.
    monkeypatch.setattr(demo.handlers, "fetch_source",
                        lambda url, timeout: time.sleep(0.4) or b"slow")
    started = time.monotonic()
    operation = researcher.attest(report)

    assert time.monotonic() - started < 2.0
    assert operation.state == "failed_no_effect"
    assert "could not be read within the contract timeout" in operation.attempts.get().error
    assert not Attestation.objects.exists()


def test_a_source_larger_than_the_limit_is_refused_unread(
    researcher: Researcher, destinations: Destinations,
) -> None:
    from demo.destinations.source_client import MAX_SOURCE_BYTES

    replace_source(destinations.directory, "tides", b"x" * (MAX_SOURCE_BYTES + 1))
    operation = researcher.fetch(researcher.question(), "tides")
    assert operation.state == "failed_no_effect"
    assert "is too large" in operation.attempts.get().error
    assert not Receipt.objects.exists()


@pytest.mark.parametrize(("change", "code", "field"), [
    ({"result": "fail"}, DenialCode.ATTESTATION_FAILED, None),
    ({"policy": "another-policy/1"}, DenialCode.ATTESTATION_UNBOUND, "policy"),
    ({"report_digest": "sha256:" + "0" * 64}, DenialCode.ATTESTATION_UNBOUND, "digest"),
])
def test_the_attestation_is_checked_again_at_the_decision(
    researcher: Researcher, destinations: Destinations, change: dict[str, Any],
    code: DenialCode, field: str | None,
) -> None:
    report, attestation_id = researcher.attested_report()
    proposal = researcher.propose_publication(report, attestation_id)
    # A store whose attestation no longer holds (written past the services, as if re-judged).
    Attestation.objects.filter(id=attestation_id).update(**change)

    denial = refused(researcher.world.grant, proposal)

    assert denial.code is code
    assert denial.details.get("field") == field
    assert publications(destinations) == []


def test_the_chain_lists_its_resource_moves_for_the_audit_replay(
    researcher: Researcher, destinations: Destinations,
) -> None:
    from dispatch.services.audit import audit_replay

    question = researcher.question()
    report, attestation_id = researcher.attested_report(question)
    proposal = researcher.propose_publication(report, attestation_id)
    researcher.world.grant(proposal)
    operation = researcher.run(proposal)
    attested = AuditEvent.objects.get(kind="attestation.issued")
    assert attested.details["resource_moves"] == [
        {"id": report.id, "revision": 1, "event": "attest"}]
    answered = AuditEvent.objects.get(kind="question.answered")
    assert (answered.operation_id, answered.details["resource_moves"]) == (
        operation.id, [{"id": question.id, "revision": 1, "event": "answer"}])
    replayed = audit_replay()
    assert replayed.violations == []
    assert replayed.resources == 2
