"""Denial codes carry the HTTP status docs/design.md#denials lists and a remedy; diagnostic codes
are stable."""

from __future__ import annotations

import re

import pytest

from protocols.denials import (
    MAX_ERROR_TEXT,
    MAX_TEXT,
    Denial,
    DenialCode,
    DiagnosticCode,
    shorten,
    text_weight,
)

# Copied by hand from docs/design.md#denials, in its order.
DESIGN_STATUSES: dict[str, int] = {
    "malformed_request": 400,
    "unauthenticated": 401,
    "request_too_large": 413,
    "unsupported_media_type": 415,
    "schema_invalid": 422,
    "unknown_operation": 404,
    "not_found": 404,
    "contract_mismatch": 409,
    "tool_not_permitted": 403,
    "authority_missing": 403,
    "authority_expired": 403,
    "authority_revoked": 403,
    "scope_violation": 403,
    "effect_not_permitted": 403,
    "protocol_state_invalid": 409,
    "stale_revision": 409,
    "approval_required": 403,
    "approval_pending": 409,
    "approval_denied": 403,
    "approval_expired": 403,
    "approval_revoked": 403,
    "approval_decided": 409,
    "proposal_mismatch": 409,
    "permit_claimed": 409,
    "role_required": 403,
    "delegation_widens": 403,
    "budget_exhausted": 429,
    "unsafe_retry": 409,
    "protected_race": 422,
    "parallel_capture": 422,
    "persistence_failure": 503,
    "approver_is_requester": 403,
    "attestation_missing": 403,
    "attestation_failed": 403,
    "attestation_unbound": 409,
    "paused": 403,
    # A workflow run's refusals before any step (`dispatch.workflows.WorkflowRefused`).
    "unsupported_step": 422,
    "input_invalid": 422,
    "execution_mismatch": 409,
}

# docs/design.md#audit reserves E001-E007; the checker added E008-E017, the evidence chain
# (docs/design.md#evidence) E018-E020. Values never change once published.
DIAGNOSTICS: dict[str, str] = {
    "MISSING_AUTHORITY": "AGL-E001",
    "INVALID_PROTOCOL_STATE": "AGL-E002",
    "CONSUMED_PERMIT": "AGL-E003",
    "INCOMPATIBLE_BRANCH_OWNERSHIP": "AGL-E004",
    "UNBOUND_APPROVAL": "AGL-E005",
    "UNSAFE_RETRY": "AGL-E006",
    "PROTECTED_RACE": "AGL-E007",
    "EFFECT_CEILING_EXCEEDED": "AGL-E008",
    "UNKNOWN_OPERATION": "AGL-E009",
    "NON_EXHAUSTIVE_MATCH": "AGL-E010",
    "LOOP_INVARIANT": "AGL-E011",
    "PARALLEL_CAPTURE": "AGL-E012",
    "FORGED_VALUE": "AGL-E013",
    "UNDEFINED_NAME": "AGL-E014",
    "TYPE_MISMATCH": "AGL-E015",
    "INVALID_ARGUMENTS": "AGL-E016",
    "MALFORMED_WORKFLOW": "AGL-E017",
    "UNATTESTED_PUBLICATION": "AGL-E018",
    "UNBOUND_ATTESTATION": "AGL-E019",
    "FOREIGN_RECEIPT": "AGL-E020",
}


def test_denial_codes_are_exactly_those_of_design() -> None:
    assert {code.value for code in DenialCode} == set(DESIGN_STATUSES)
    assert len(list(DenialCode)) == len(DESIGN_STATUSES)


@pytest.mark.parametrize(("code", "status"), DESIGN_STATUSES.items())
def test_denial_code_has_the_design_status(code: str, status: int) -> None:
    assert DenialCode(code).status == status
    assert Denial(DenialCode(code)).status == status


@pytest.mark.parametrize("code", list(DenialCode), ids=[c.value for c in DenialCode])
def test_denial_code_has_a_remedy(code: DenialCode) -> None:
    assert isinstance(code.remedy, str)
    assert code.remedy.strip()
    assert code.remedy.rstrip().endswith(".")
    assert len(code.remedy) >= 20


@pytest.mark.parametrize("code", list(DenialCode), ids=[c.value for c in DenialCode])
def test_denial_code_name_matches_its_wire_value(code: DenialCode) -> None:
    assert code.value == code.name.lower()
    assert re.fullmatch(r"[a-z]+(_[a-z]+)*", code.value)


def test_remedies_are_distinct() -> None:
    remedies = [code.remedy for code in DenialCode]
    assert len(set(remedies)) == len(remedies)


def test_denial_body_has_code_message_and_details() -> None:
    denial = Denial(DenialCode.SCOPE_VIOLATION, key="mailbox", value="sales@acme.example")
    assert denial.as_body() == {"error": {
        "code": "scope_violation",
        "message": DenialCode.SCOPE_VIOLATION.remedy,
        "details": {"key": "mailbox", "value": "sales@acme.example"},
    }}


def test_denial_without_details_has_an_empty_details_object() -> None:
    body = Denial(DenialCode.NOT_FOUND).as_body()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["details"] == {}


def test_denial_message_overrides_the_remedy() -> None:
    denial = Denial(DenialCode.PROTOCOL_STATE_INVALID, "The proposal was cancelled.")
    assert denial.message == "The proposal was cancelled."
    assert denial.as_body()["error"]["message"] == "The proposal was cancelled."
    assert denial.code is DenialCode.PROTOCOL_STATE_INVALID


def test_empty_message_falls_back_to_the_remedy() -> None:
    assert Denial(DenialCode.NOT_FOUND, "").message == DenialCode.NOT_FOUND.remedy


def test_denial_string_names_the_code() -> None:
    assert str(Denial(DenialCode.PERMIT_CLAIMED)).startswith("permit_claimed: ")


def test_denial_body_code_is_a_plain_string() -> None:
    code = Denial(DenialCode.BUDGET_EXHAUSTED).as_body()["error"]["code"]
    assert type(code) is str
    assert code == "budget_exhausted"


def test_schema_invalid_details_keep_the_errors_list() -> None:
    errors = [{"pointer": "/arguments/amount", "message": "too many places"}]
    body = Denial(DenialCode.SCHEMA_INVALID, errors=errors).as_body()
    assert body["error"]["details"] == {"errors": errors, "error_count": 1}


def test_schema_invalid_lists_at_most_50_errors_and_counts_them() -> None:
    errors = [{"pointer": f"/k{n:03d}", "message": "is not allowed"} for n in range(120)]
    denial = Denial(DenialCode.SCHEMA_INVALID, errors=errors)
    assert denial.details == {"errors": errors[:50], "error_count": 120}
    assert len(errors) == 120  # the caller's list is left alone


def test_denial_is_an_exception() -> None:
    with pytest.raises(Denial) as caught:
        raise Denial(DenialCode.ROLE_REQUIRED, role="operator")
    assert caught.value.details == {"role": "operator"}


def test_diagnostic_codes_are_stable() -> None:
    assert {code.name: code.value for code in DiagnosticCode} == DIAGNOSTICS


def test_diagnostic_code_values_are_unique() -> None:
    values = [code.value for code in DiagnosticCode]
    assert len(set(values)) == len(values)
    # StrEnum would silently alias a duplicate value under a second name.
    assert len(DiagnosticCode.__members__) == len(list(DiagnosticCode))


def test_diagnostic_codes_are_numbered_without_gaps() -> None:
    numbers = sorted(int(code.value.removeprefix("AGL-E")) for code in DiagnosticCode)
    assert numbers == list(range(1, len(numbers) + 1))
    for code in DiagnosticCode:
        assert re.fullmatch(r"AGL-E\d{3}", code.value)


def test_denial_code_values_are_unique() -> None:
    assert len(DenialCode.__members__) == len(list(DenialCode))


@pytest.mark.parametrize("text", ["", "short", "x" * MAX_TEXT, '"' * (MAX_TEXT // 2)])
def test_a_text_within_the_bound_is_left_whole(text: str) -> None:
    assert shorten(text) == text


@pytest.mark.parametrize("char", ["x", '"', "\x01", "é", "\u2028", "😀"])
def test_a_longer_text_is_cut_within_the_bound_and_says_so(char: str) -> None:
    cut = shorten(char * 100_000)
    assert cut.endswith("…")
    assert cut[:-1] == char * (len(cut) - 1)
    assert MAX_TEXT - 12 < text_weight(cut) <= MAX_TEXT


def test_every_text_a_denial_holds_is_cut() -> None:
    long = "k" * 100_000
    denial = Denial(DenialCode.SCHEMA_INVALID, long, errors=[
        {"pointer": f"/payload/{long}", "message": f"{long} is not allowed"}], other={long: [long]})
    assert text_weight(denial.message) <= MAX_TEXT
    [error] = denial.details["errors"]
    assert error["pointer"].startswith("/payload/kkk") and error["pointer"].endswith("…")
    assert text_weight(error["pointer"]) <= MAX_ERROR_TEXT
    assert text_weight(error["message"]) <= MAX_ERROR_TEXT
    [(key, [value])] = denial.details["other"].items()
    assert text_weight(key) <= MAX_TEXT and text_weight(value) <= MAX_TEXT
