"""`cited-sources/1` judges a report against its receipts (docs/design.md#evidence): each condition
alone fails with a finding naming the citation, the receipt and the source; findings come in
citation order, then the report's; validators register by `name@version` under one policy each."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from protocols.canonical import digest_bytes
from protocols.evidence import (
    CITED_SOURCES_V1,
    VALIDATORS,
    Citation,
    Finding,
    Judgement,
    ReceiptView,
    ReportView,
    StoredBytes,
    ValidatorConflictError,
    ValidatorRegistry,
    ValidatorSpec,
    cited_sources_v1,
)

BEES_URL = "http://127.0.0.1:8025/sources/bees"
HIVES_URL = "http://127.0.0.1:8025/sources/hives"
BEES = b"Honey bees visit about fifty flowers on each trip.\nA colony has one queen.\n"
HIVES = "A hive holds up to 60,000 bees in summer — fewer in winter.".encode()


def _receipt(rid: str, source: str, data: bytes, question: str = "q_1") -> ReceiptView:
    return ReceiptView(id=rid, question_id=question, question_revision=1, source=source,
                       content_digest=digest_bytes(data))


RECEIPTS = {
    "evr_bees": _receipt("evr_bees", BEES_URL, BEES),
    "evr_hives": _receipt("evr_hives", HIVES_URL, HIVES),
}
STORE = {"evr_bees": BEES, "evr_hives": HIVES}


def _report(*citations: tuple[str, str], question: str = "q_1") -> ReportView:
    return ReportView(id="rep_1", revision=2, digest="sha256:" + "0" * 64, question_id=question,
                      title="Bees", body="What bees do.",
                      citations=tuple(Citation(receipt=r, quote=q) for r, q in citations))


GOOD = (("evr_bees", "about fifty flowers"), ("evr_hives", "up to 60,000 bees in summer — fewer"))


def _judge(report: ReportView, receipts: Mapping[str, ReceiptView] = RECEIPTS,
           store: Mapping[str, bytes] = STORE) -> Judgement:
    return cited_sources_v1(report, receipts, store.get)


def _messages(judgement: Judgement) -> list[tuple[int | None, str]]:
    return [(f.citation, f.message) for f in judgement.findings]


def test_a_report_citing_two_receipts_verbatim_passes() -> None:
    assert _judge(_report(*GOOD)) == Judgement("pass", ())


def test_a_quote_may_span_lines_and_be_the_whole_source() -> None:
    report = _report(("evr_bees", "each trip.\nA colony"), ("evr_hives", HIVES.decode()))
    assert _judge(report).result == "pass"


@pytest.mark.parametrize("citations", [(), GOOD[:1], (GOOD[0], ("evr_bees", "one queen"))])
def test_fewer_than_two_distinct_receipts_fail(citations: tuple[tuple[str, str], ...]) -> None:
    distinct = len({r for r, _ in citations})
    cites = "1 receipt" if distinct == 1 else f"{distinct} receipts"
    assert _messages(_judge(_report(*citations))) == [
        (None, f"the report cites {cites}; cited-sources/1 needs at least 2")]


def test_a_missing_receipt_does_not_exist() -> None:
    judgement = _judge(_report(*GOOD, ("evr_gone", "anything")))
    assert judgement.result == "fail"
    assert _messages(judgement) == [(2, "citation 3: receipt evr_gone does not exist")]


def test_a_receipt_left_out_of_the_visible_ones_does_not_exist() -> None:
    """Another tenant's receipt is not in the mapping: the same words as a missing one."""
    visible = {"evr_bees": RECEIPTS["evr_bees"]}
    assert _messages(_judge(_report(*GOOD), receipts=visible)) == [
        (1, "citation 2: receipt evr_hives does not exist")]


def test_a_receipt_of_another_question_fails() -> None:
    receipts = {**RECEIPTS, "evr_hives": _receipt("evr_hives", HIVES_URL, HIVES, "q_other")}
    assert _messages(_judge(_report(*GOOD), receipts=receipts)) == [
        (1, "citation 2: receipt evr_hives was issued for question q_other, not this report's "
            f"question q_1 (source {HIVES_URL})")]


def test_another_revision_of_the_same_question_counts() -> None:
    receipts = {**RECEIPTS, "evr_hives": replace(RECEIPTS["evr_hives"], question_revision=7)}
    assert _judge(_report(*GOOD), receipts=receipts).result == "pass"


def test_changed_bytes_no_longer_match_the_digest() -> None:
    store = {**STORE, "evr_bees": BEES.replace(b"fifty", b"fifty-one")}
    assert _messages(_judge(_report(*GOOD), store=store)) == [
        (0, "citation 1: the source's stored bytes no longer match the receipt's digest "
            f"{digest_bytes(BEES)} (source {BEES_URL}, receipt evr_bees)")]


def test_a_digest_of_other_form_is_a_mismatch() -> None:
    upper = digest_bytes(BEES).upper()
    receipts = {**RECEIPTS, "evr_bees": replace(RECEIPTS["evr_bees"], content_digest=upper)}
    assert "no longer match" in _messages(_judge(_report(*GOOD), receipts=receipts))[0][1]


def test_bytes_the_store_no_longer_holds_fail() -> None:
    store = {"evr_hives": HIVES}
    assert _messages(_judge(_report(*GOOD), store=store)) == [
        (0, f"citation 1: no bytes could be read for source {BEES_URL} (receipt evr_bees)")]


@pytest.mark.parametrize(
    ("quote", "hinted"),
    [
        ("about sixty flowers", False),
        ("About fifty flowers", True),           # case only
        ("about  fifty flowers", True),          # whitespace only
        ("trip. A colony", True),                # a newline in the source, a space in the quote
        ("one queen.\nThe end", False),          # runs past the end of the source
        ("aboutfifty flowers", False),           # whitespace removed is another text
        ("about fifty flowers.", False),
    ],
)
def test_a_quote_not_verbatim_in_its_source_fails(quote: str, hinted: bool) -> None:
    hint = ("; it appears there only if case and whitespace are ignored: quote the source's "
            "exact text") if hinted else ""
    assert _messages(_judge(_report(("evr_bees", quote), GOOD[1]))) == [
        (0, f"citation 1: quote not found in source {BEES_URL} (receipt evr_bees){hint}")]


def test_a_quote_is_not_unicode_normalized() -> None:
    composed = "café au lait".encode()
    receipts = {**RECEIPTS, "evr_cafe": _receipt("evr_cafe", BEES_URL, composed)}
    store = {**STORE, "evr_cafe": composed}
    decomposed = "cafe\u0301"
    judgement = _judge(_report(("evr_cafe", decomposed), GOOD[1]), receipts, store)
    assert judgement.result == "fail"
    assert _judge(_report(("evr_cafe", "café"), GOOD[1]), receipts, store).result == "pass"


def test_bytes_that_are_not_utf8_fail_and_are_not_searched() -> None:
    latin1 = "Les abeilles visitent à peu près cinquante fleurs.".encode("latin-1")
    receipts = {**RECEIPTS, "evr_fr": _receipt("evr_fr", BEES_URL + "-fr", latin1)}
    store = {**STORE, "evr_fr": latin1}
    assert _messages(_judge(_report(("evr_fr", "Les abeilles"), GOOD[1]), receipts, store)) == [
        (0, f"citation 1: the stored bytes of source {BEES_URL}-fr (receipt evr_fr) are not "
            "UTF-8 text (invalid byte at offset 22), so no quote can be found in them")]


@pytest.mark.parametrize("quote", ["", " ", "\n\t "])
def test_an_empty_quote_fails(quote: str) -> None:
    assert _messages(_judge(_report(("evr_bees", quote), GOOD[1]))) == [
        (0, f"citation 1: the quote is empty; quote the words of source {BEES_URL} "
            "(receipt evr_bees) that support the report")]


def test_an_empty_quote_of_a_missing_receipt_gives_both_findings() -> None:
    assert _messages(_judge(_report(GOOD[0], GOOD[1], ("evr_gone", "")))) == [
        (2, "citation 3: receipt evr_gone does not exist"),
        (2, "citation 3: the quote is empty; quote the words of the source that support the "
            "report"),
    ]


def test_the_same_receipt_cited_twice_counts_once_and_is_read_once() -> None:
    reads: list[str] = []

    def stored(receipt_id: str) -> bytes | None:
        reads.append(receipt_id)
        return STORE.get(receipt_id)

    report = _report(GOOD[0], ("evr_bees", "one queen"), GOOD[1])
    assert report.cited_receipts == ("evr_bees", "evr_hives")
    assert cited_sources_v1(report, RECEIPTS, stored).result == "pass"
    assert reads == ["evr_bees", "evr_hives"]


def test_a_missing_receipt_is_never_read() -> None:
    reads: list[str] = []

    def stored(receipt_id: str) -> bytes | None:
        reads.append(receipt_id)
        return b"a ghost"

    cited_sources_v1(_report(("evr_gone", "ghost"), GOOD[1]), RECEIPTS, stored)
    assert reads == ["evr_hives"]


def test_a_receipt_of_another_question_is_never_read() -> None:
    reads: list[str] = []
    receipts = {**RECEIPTS, "evr_other": _receipt("evr_other", HIVES_URL, HIVES, "q_other")}

    def stored(receipt_id: str) -> bytes | None:
        reads.append(receipt_id)
        return HIVES

    judgement = cited_sources_v1(_report(("evr_other", "HIVES"), GOOD[1]), receipts, stored)
    assert reads == ["evr_hives"]
    assert judgement.result == "fail"
    assert [f.message for f in judgement.findings if f.citation == 0] == [
        "citation 1: receipt evr_other was issued for question q_other, not this report's "
        f"question q_1 (source {HIVES_URL})"]


def test_several_failures_come_in_citation_order_then_the_report() -> None:
    receipts = {**RECEIPTS, "evr_other": _receipt("evr_other", HIVES_URL, HIVES, "q_other")}
    store = {**STORE, "evr_other": HIVES}
    report = _report(
        ("evr_gone", "x"),                      # 1: missing
        ("evr_other", "nowhere in it"),         # 2: another question: not read at all
        ("evr_gone", "y"),                      # 3: missing again
    )
    assert _messages(_judge(report, receipts, store)) == [
        (0, "citation 1: receipt evr_gone does not exist"),
        (1, "citation 2: receipt evr_other was issued for question q_other, not this report's "
            f"question q_1 (source {HIVES_URL})"),
        (2, "citation 3: receipt evr_gone does not exist"),
        # two distinct ids are cited, so no report-level finding: the missing one has its own
    ]


def test_a_report_level_finding_comes_last() -> None:
    store = {**STORE, "evr_bees": b"changed"}
    assert _messages(_judge(_report(GOOD[0], ("evr_bees", "")), store=store)) == [
        (0, "citation 1: the source's stored bytes no longer match the receipt's digest "
            f"{digest_bytes(BEES)} (source {BEES_URL}, receipt evr_bees)"),
        (1, "citation 2: the source's stored bytes no longer match the receipt's digest "
            f"{digest_bytes(BEES)} (source {BEES_URL}, receipt evr_bees)"),
        (1, f"citation 2: the quote is empty; quote the words of source {BEES_URL} "
            "(receipt evr_bees) that support the report"),
        (None, "the report cites 1 receipt; cited-sources/1 needs at least 2"),
    ]


def test_the_same_inputs_give_an_equal_judgement() -> None:
    report = _report(("evr_gone", ""), ("evr_bees", "About fifty"), GOOD[1])
    assert _judge(report) == _judge(report)
    assert hash(_judge(report)) == hash(_judge(report))


def test_findings_serialize_for_the_attestation() -> None:
    assert Finding(1, "citation 2: x").as_json() == {"citation": 1, "message": "citation 2: x"}
    assert Finding(None, "r").as_json() == {"citation": None, "message": "r"}


def test_a_failing_judgement_names_a_finding() -> None:
    assert Judgement.of([]) == Judgement("pass")
    assert Judgement.of([Finding(None, "r")]).result == "fail"
    with pytest.raises(ValueError, match="at least one finding"):
        Judgement("fail", ())
    with pytest.raises(ValueError, match="'pass' or 'fail'"):
        Judgement("verified", ())  # type: ignore[arg-type]


def _judge_one(text: str, quote: str) -> Judgement:
    """The judgement of a report quoting `text` once, beside a good citation of HIVES."""
    raw = text.encode()
    receipts = {**RECEIPTS, "evr_any": _receipt("evr_any", BEES_URL, raw)}
    store = {**STORE, "evr_any": raw}
    return _judge(_report(("evr_any", quote), GOOD[1]), receipts, store)


@given(st.text(min_size=1), st.data())
def test_any_substring_of_the_source_that_is_not_blank_passes(
    text: str, data: st.DataObject
) -> None:
    start = data.draw(st.integers(0, len(text) - 1))
    quote = text[start:data.draw(st.integers(start + 1, len(text)))]
    judgement = _judge_one(text, quote)
    if quote.strip():
        assert judgement == Judgement("pass")
    else:
        assert [m for _, m in _messages(judgement)] == [
            f"citation 1: the quote is empty; quote the words of source {BEES_URL} "
            "(receipt evr_any) that support the report"]


@given(st.text(alphabet="aAb \n", max_size=12), st.text(alphabet="aAb \n", min_size=1,
                                                       max_size=4))
def test_a_quote_passes_exactly_when_it_is_a_substring(text: str, quote: str) -> None:
    assume(quote.strip())
    judgement = _judge_one(text, quote)
    assert (judgement.result == "pass") == (quote in text)
    assert [f.citation for f in judgement.findings] == ([] if quote in text else [0])


# -- the registry ---------------------------------------------------------------------------


def _never(report: ReportView, receipts: Mapping[str, ReceiptView],
           stored_bytes: StoredBytes) -> Judgement:
    return Judgement("fail", (Finding(None, "a model said no"),))


def test_the_shipped_validator_is_cited_sources_at_1() -> None:
    assert VALIDATORS == (CITED_SOURCES_V1,)
    assert CITED_SOURCES_V1.validator_label == "cited-sources@1"
    assert CITED_SOURCES_V1.policy == "cited-sources/1"
    assert CITED_SOURCES_V1.fn is cited_sources_v1


def test_the_registry_finds_the_validator_of_a_policy() -> None:
    registry = ValidatorRegistry(VALIDATORS)
    assert registry.for_policy("cited-sources/1") is CITED_SOURCES_V1
    assert registry.for_policy("cited-sources/2") is None
    assert list(registry) == [CITED_SOURCES_V1]


def test_registering_the_same_spec_again_is_idempotent() -> None:
    registry = ValidatorRegistry(VALIDATORS)
    again = ValidatorSpec("cited-sources", 1, "cited-sources/1", cited_sources_v1)
    assert registry.register(again) is CITED_SOURCES_V1
    assert list(registry) == [CITED_SOURCES_V1]


@pytest.mark.parametrize(
    ("spec", "differs"),
    [
        (ValidatorSpec("cited-sources", 1, "cited-sources/1", _never), "fn"),
        (ValidatorSpec("cited-sources", 1, "other/1", cited_sources_v1), "policy"),
        (ValidatorSpec("cited-sources", 1, "other/1", _never), "policy and fn"),
    ],
)
def test_a_label_registered_with_another_function_or_policy_is_refused(
    spec: ValidatorSpec, differs: str
) -> None:
    registry = ValidatorRegistry(VALIDATORS)
    with pytest.raises(ValidatorConflictError) as refused:
        registry.register(spec)
    assert str(refused.value) == (
        f"validator cited-sources@1 is already registered with another {differs}")
    assert registry.for_policy("cited-sources/1") is CITED_SOURCES_V1


def test_a_policy_served_by_another_name_is_refused() -> None:
    registry = ValidatorRegistry(VALIDATORS)
    with pytest.raises(ValidatorConflictError, match="already served by validator "
                                                     "cited-sources@1; llm-judge@1 cannot"):
        registry.register(ValidatorSpec("llm-judge", 1, "cited-sources/1", _never))


def test_a_model_backed_validator_registers_under_its_own_policy() -> None:
    registry = ValidatorRegistry(VALIDATORS)
    judge = registry.register(ValidatorSpec("llm-judge", 1, "supported-claims/1", _never))
    assert registry.for_policy("supported-claims/1") is judge
    assert judge.fn(_report(*GOOD), RECEIPTS, STORE.get).result == "fail"
    assert [s.validator_label for s in registry] == ["cited-sources@1", "llm-judge@1"]


def test_the_newest_version_serves_the_policy() -> None:
    registry = ValidatorRegistry(VALIDATORS)
    newer = registry.register(ValidatorSpec("cited-sources", 2, "cited-sources/1", _never))
    assert registry.for_policy("cited-sources/1") is newer
    assert registry.register(CITED_SOURCES_V1) is CITED_SOURCES_V1
    assert registry.for_policy("cited-sources/1") is newer


@pytest.mark.parametrize(
    ("name", "version", "policy", "message"),
    [
        ("Cited", 1, "cited-sources/1", "a validator name is"),
        ("cited sources", 1, "cited-sources/1", "a validator name is"),
        ("", 1, "cited-sources/1", "a validator name is"),
        ("cited-sources", 0, "cited-sources/1", "a version is an int >= 1"),
        ("cited-sources", True, "cited-sources/1", "a version is an int >= 1"),
        ("cited-sources", "1", "cited-sources/1", "a version is an int >= 1"),
        ("cited-sources", 1, "cited-sources", "a policy is '<name>/<version>'"),
        ("cited-sources", 1, "cited-sources/01", "a policy is '<name>/<version>'"),
        ("cited-sources", 1, "cited-sources/1\n", "a policy is '<name>/<version>'"),
    ],
)
def test_a_malformed_spec_is_refused(name: str, version: int, policy: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ValidatorSpec(name, version, policy, cited_sources_v1)
