"""The evidence chain in the workflow checker (docs/design.md#evidence): reads, verdicts, joins, the
three diagnostics of a publication, and the facts they rest on."""

from __future__ import annotations

import textwrap

import pytest

from demo.contracts import build_registry
from protocols.denials import DiagnosticCode
from protocols.workflow import (
    CheckedWorkflow,
    Diagnostics,
    WorkflowBuilder,
    arm,
    check_source,
    check_workflow,
    format_text,
    ref,
)
from protocols.workflow.facts import Attestation, Evidence, Lost, join_evidence
from protocols.workflow.ir import Span

REGISTRY = build_registry({"research.fetch": "impl-fetch-1", "evidence.attest": "impl-attest-1",
                           "report.publish": "impl-publish-1"})
D = DiagnosticCode
HEAD = """\
version: 1
name: evidence
effects: [read, human, external_write]
authority:
  - operations: [research.fetch, evidence.attest, report.publish]
    scope: {topic: "*"}
inputs:
  report: {handle: report}
  urgent: bool
steps:
"""
ATTEST = """\
  - propose: evidence.attest
    args: {report: $report}
    bind: attest
  - dispatch: $attest
    bind: attested
"""


def check(steps: str) -> CheckedWorkflow | Diagnostics:
    return check_source(HEAD + textwrap.dedent(steps), REGISTRY, filename="wf.yaml")


def codes(result: CheckedWorkflow | Diagnostics) -> list[str]:
    return [] if isinstance(result, CheckedWorkflow) else [d.code.value for d in result]


def judged(body: str) -> str:
    """`body` (indented for the `completed` arm) inside a completed attest."""
    return ATTEST + """\
  - match: $attested
    arms:
      completed:
        bind: {result: judged}
        do:
""" + textwrap.indent(textwrap.dedent(body).rstrip("\n") + "\n", " " * 10) + """\
      _: []
"""


PUBLISH = """\
- propose: report.publish
  args: {report: $report, attestation: %s}
"""


def test_an_attest_reads_the_report_and_leaves_it_editable() -> None:
    result = check(ATTEST + """\
  - edit: $report
    payload: {question: q_1, title: t, body: b, citations: []}
""")
    assert isinstance(result, CheckedWorkflow), result


def test_an_attest_of_a_revision_edited_since_its_proposal_is_stale() -> None:
    result = check("""\
  - propose: evidence.attest
    args: {report: $report}
    bind: attest
  - edit: $report
    payload: {question: q_1, title: t, body: b, citations: []}
  - dispatch: $attest
""")
    assert codes(result) == [D.INVALID_PROTOCOL_STATE.value]


@pytest.mark.parametrize(("arms", "ok"), [
    ("pass: [PUB]\nfail: []", True),
    ("fail: []\n_: [PUB]", True),  # `_` beside `fail` can only be `pass`
    ("pass: []\n_: [PUB]", False),
    ("pass: []\nfail: [PUB]", False),
    ("_: [PUB]", False),
])
def test_only_an_arm_that_can_only_be_pass_publishes(arms: str, ok: bool) -> None:
    publish = "{propose: report.publish, args: {report: $report, " \
              "attestation: $judged.attestation.id}}"
    body = "- match: $judged.attestation.result\n  arms:\n" + textwrap.indent(
        arms.replace("PUB", publish), "    ")
    result = check(judged(body))
    assert codes(result) == ([] if ok else [D.UNATTESTED_PUBLICATION.value]), result


def test_pass_and_fail_arms_make_a_verdict_match_exhaustive() -> None:
    body = "- match: $judged.attestation.result\n  arms:\n    pass: []\n    fail: []\n"
    assert isinstance(check(judged(body)), CheckedWorkflow)
    other = "- match: $judged.attestation.id\n  arms:\n    pass: []\n    fail: []\n"
    assert codes(check(judged(other))) == [D.NON_EXHAUSTIVE_MATCH.value]


def test_copies_and_data_match_fields_keep_the_attestation() -> None:
    body = """\
- let: record
  value: $judged.attestation
- let: verdict
  value: $record.result
- match: $record
  arms:
    _:
      bind: {id: attestation}
      do:
        - match: $verdict
          arms:
            pass:
""" + textwrap.indent(PUBLISH % "$attestation", " " * 14) + """\
            fail: []
"""
    result = check(judged(body))
    assert isinstance(result, CheckedWorkflow), result


def test_the_record_itself_is_not_its_id() -> None:
    body = "- match: $judged.attestation.result\n  arms:\n    pass:\n" + textwrap.indent(
        PUBLISH % "$judged", "      ") + "    fail: []\n"
    result = check(judged(body))
    assert isinstance(result, Diagnostics)
    assert [d.code for d in result] == [D.UNATTESTED_PUBLICATION]
    assert "its id is `$judged.attestation.id`" in (result.items[0].actual or "")


def test_two_passing_attestations_of_one_revision_join() -> None:
    """Each path holds another attestation of the same revision, passed on that path: the name
    holds a passing attestation of that revision after the join."""
    body = """\
- match: $judged.attestation.result
  arms:
    pass:
      - if: $urgent
        then:
          - let: chosen
            value: $judged.attestation.id
        else:
          - propose: evidence.attest
            args: {report: $report}
            bind: again
          - dispatch: $again
            bind: again_outcome
          - match: $again_outcome
            arms:
              completed:
                bind: {result: second}
                do:
                  - match: $second.attestation.result
                    arms:
                      pass:
                        - let: chosen
                          value: $second.attestation.id
                      fail:
                        - let: chosen
                          value: $judged.attestation.id
              _:
                - let: chosen
                  value: $judged.attestation.id
""" + textwrap.indent(PUBLISH % "$chosen", "      ") + """\
    fail: []
"""
    result = check(judged(body))
    assert isinstance(result, CheckedWorkflow), result


def test_a_refused_attestation_does_not_also_report_the_report_state() -> None:
    """The report is still a draft, but the attestation is what the dispatcher names first."""
    result = check("  " + (PUBLISH % "att_1").replace("\n", "\n  "))
    assert codes(result) == [D.UNATTESTED_PUBLICATION.value]


def test_a_receipt_is_not_an_attestation() -> None:
    text = HEAD.replace("  urgent: bool", "  question: {handle: question}") + textwrap.dedent("""\
      - propose: research.fetch
        args: {question: $question, source: "http://127.0.0.1:8002/sources/a"}
        bind: fetch
      - dispatch: $fetch
        bind: fetched
      - match: $fetched
        arms:
          completed:
            bind: {result: source}
            do:
              - propose: report.publish
                args: {report: $report, attestation: $source.receipt.id}
          _: []
    """)
    result = check_source(text, REGISTRY, filename="wf.yaml")
    assert isinstance(result, Diagnostics)
    assert [d.code for d in result] == [D.UNATTESTED_PUBLICATION]
    assert result.items[0].actual == "data from a fetch's receipt, not from an attestation"


def test_new_diagnostics_have_titles_and_the_builder_path() -> None:
    workflow = (WorkflowBuilder("publish", effects={"human", "external_write"})
                .authority(["report.publish"], {"topic": "*"})
                .handle("report", "report", state="attested")
                .propose("report.publish", report=ref("report"), attestation="att_1",
                         bind="publication")
                .request_approval(ref("publication"), bind="decision")
                .match(ref("decision"), Granted=arm(
                    lambda b: b.dispatch(ref("publication"), permit=ref("permit")),
                    permit="permit"), Denied=arm())
                .build())
    result = check_workflow(workflow, REGISTRY)
    assert isinstance(result, Diagnostics), result
    assert len(result) == 1, format_text(result)
    item = result.items[0].as_json()
    assert (item["code"], item["title"]) == ("AGL-E018", "publication without an attestation")
    assert item["path"] == "steps[0].args.attestation"
    assert item["line"] is None


def test_join_keeps_an_attestation_only_when_every_path_holds_it() -> None:
    at = Span("steps[1]")
    fact = Attestation("k1", "judged", "r", 1, "cited-sources/1", True, at)
    held, empty = Evidence(), Evidence()
    held.attestations["v1"] = fact
    both = join_evidence([("then", {"a": "v1"}, held), ("else", {"a": "v1"}, held)],
                         {"a": "v1"}, at, "if")
    assert both.attestations["v1"] == fact
    one = join_evidence([("then", {"a": "v1"}, held), ("else", {"a": "v2"}, empty)],
                        {"a": "v3"}, at, "if")
    lost = one.attestations["v3"]
    assert isinstance(lost, Lost)
    assert "only on the `then` path of the if" in lost.reason
    unpassed = Evidence()
    unpassed.attestations["v1"] = Attestation("k1", "judged", "r", 1, "cited-sources/1",
                                              False, at)
    mixed = join_evidence([("a", {"x": "v1"}, held), ("b", {"x": "v1"}, unpassed)],
                          {"x": "v1"}, at, "match")
    joined = mixed.attestations["v1"]
    assert isinstance(joined, Attestation)
    assert not joined.passed


def test_following_fields_reaches_the_id_and_the_verdict() -> None:
    fact = Attestation("k", "judged", "r", 1, None, False, Span("s"))
    assert fact.follow(("attestation",)) == Attestation(
        "k", "judged", "r", 1, None, False, Span("s"), ("id",), ("result",))
    the_id = fact.follow(("attestation", "id"))
    assert the_id is not None
    assert (the_id.id_at, the_id.verdict_at) == ((), None)
    assert fact.follow(("attestation", "report")) is None
    assert fact.follow(("receipt",)) is None
