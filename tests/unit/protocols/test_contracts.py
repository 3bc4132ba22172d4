"""Operation contracts: fingerprints, the registry, schema pointers and the amount normalizer."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from demo.contracts import crm_lookup, email_send, payments_transfer
from protocols.canonical import digest
from protocols.contracts import (
    ApprovalRequirement,
    AttestationRequirement,
    AuthorityRequirement,
    ContractConflictError,
    ContractRegistry,
    Effect,
    EvidenceRole,
    Idempotency,
    OperationContract,
    Reconciliation,
    SchedulingContract,
    compile_schema,
    schema_errors,
)
from protocols.denials import Denial, DenialCode

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def transfer_arguments(amount: Any, currency: Any = "EUR") -> dict[str, Any]:
    return {"from_account": "acct-001", "to_account": "acct-999", "amount": amount,
            "currency": currency, "memo": ""}


# --- fingerprints -------------------------------------------------------------------------------


def test_fingerprint_is_a_digest_of_the_declaration() -> None:
    contract = email_send("fp")
    assert DIGEST.match(contract.fingerprint)
    assert contract.fingerprint == digest(contract.declaration())


def test_fingerprint_is_stable_across_instances() -> None:
    assert email_send("fp").fingerprint == email_send("fp").fingerprint
    assert payments_transfer("fp").fingerprint == payments_transfer("fp").fingerprint


def test_fingerprint_does_not_depend_on_set_order() -> None:
    """Effects are a frozenset, whose iteration order varies with the hash seed."""
    effects = [Effect.FINANCIAL_WRITE, Effect.EXTERNAL_WRITE, Effect.HUMAN, Effect.READ]
    prints = {replace(BASE, possible_effects=frozenset(order)).fingerprint
              for order in (effects, effects[::-1], effects[1:] + effects[:1])}
    assert len(prints) == 1
    assert replace(BASE, possible_effects=frozenset(effects)).declaration()[
        "possible_effects"] == ["external_write", "financial_write", "human", "read"]


def test_fingerprint_is_pinned() -> None:
    """A change of canonical encoding or declaration shape changes every stored fingerprint;
    it must be deliberate (update this value with a new contract version or migration)."""
    contract = OperationContract(
        qualified_name="test.pinned", contract_version=1, implementation_fingerprint="fp",
        input_type={"type": "object", "properties": {"a": {"type": "string", "default": ""}}},
        output_type={"type": "object"},
        authority_requirements=(AuthorityRequirement("customer", "/a"),),
        possible_effects=frozenset({Effect.READ, Effect.HUMAN}),
        approval_requirement=ApprovalRequirement("operator", 60),
        idempotency_contract=Idempotency.IDEMPOTENT,
        scheduling_contract=SchedulingContract(timeout=2.5, max_attempts=2, budget_cost=1),
        destination="crm",
    )
    assert contract.fingerprint == (
        "sha256:92610f04f18fcc18cc140388eb96012c5b6abf76cd0bc5a6cbf07a7b8e464cec")


def test_the_transition_tables_are_part_of_the_fingerprint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/design.md#outcomes, #extensions: recovery checks the fingerprint, so it must change when
    a table a contract's operations move through does: the email_draft protocol, or the
    operation's."""
    from demo import tables as tables_of_demo
    from protocols import lifecycle

    contract = email_send("fp")
    tables = contract.declaration()["protocols"]
    assert set(tables) == {"operation", "resource:email_draft"}
    assert tables["resource:email_draft"] == tables_of_demo.EMAIL_DRAFT.canonical()
    assert ["claimed", "complete", "completed"] in tables["operation"]["transitions"]
    before = contract.fingerprint

    draft = tables_of_demo.EMAIL_DRAFT
    widened = replace(draft, transitions={
        **draft.transitions,
        (lifecycle.ResourceState.UNKNOWN, lifecycle.ResourceEvent.CLAIM):
            lifecycle.ResourceState.DISPATCHING})
    monkeypatch.setitem(lifecycle.RESOURCE_PROTOCOLS, "email_draft", widened)  # type: ignore[arg-type]
    assert email_send("fp").fingerprint != before
    monkeypatch.setitem(lifecycle.RESOURCE_PROTOCOLS, "email_draft", draft)  # type: ignore[arg-type]
    assert email_send("fp").fingerprint == before

    operation = lifecycle.OPERATION_LIFECYCLE
    monkeypatch.setattr(lifecycle, "OPERATION_LIFECYCLE", replace(operation, transitions={
        k: v for k, v in operation.transitions.items()
        if k != (lifecycle.OperationState.UNKNOWN, lifecycle.OperationEvent.RECONCILE_COMPLETED)}))
    assert email_send("fp").fingerprint != before
    # A contract without preconditions still pins the operation lifecycle.
    assert set(crm_lookup("fp").declaration()["protocols"]) == {"operation"}


def test_fingerprint_ignores_schema_key_order() -> None:
    contract = email_send("fp")
    reordered = replace(contract, input_type=dict(reversed(list(contract.input_type.items()))))
    assert list(reordered.input_type) != list(contract.input_type)
    assert reordered.fingerprint == contract.fingerprint


BASE = payments_transfer("fp")

CHANGES: list[tuple[str, dict[str, Any]]] = [
    ("qualified_name", {"qualified_name": "payments.transfer2"}),
    ("contract_version", {"contract_version": 2}),
    ("implementation_fingerprint", {"implementation_fingerprint": "fp2"}),
    ("input_schema", {"input_type": {**BASE.input_type, "required": ["from_account"]}}),
    ("input_schema_nested", {"input_type": {**BASE.input_type, "properties": {
        **BASE.input_type["properties"], "memo": {"type": "string", "maxLength": 141,
                                                  "default": ""}}}}),
    ("output_schema", {"output_type": {"type": "object", "required": ["id"]}}),
    ("authority_key", {"authority_requirements": (AuthorityRequirement("acct", "/from_account"),)}),
    ("authority_pointer", {"authority_requirements": (
        AuthorityRequirement("account", "/to_account"),)}),
    ("authority_added", {"authority_requirements": (
        AuthorityRequirement("account", "/from_account"),
        AuthorityRequirement("customer", "/memo"))}),
    ("effects", {"possible_effects": frozenset({Effect.EXTERNAL_WRITE, Effect.FINANCIAL_WRITE,
                                                Effect.HUMAN})}),
    ("effects_fewer", {"possible_effects": frozenset({Effect.EXTERNAL_WRITE})}),
    ("approval_role", {"approval_requirement": ApprovalRequirement("admin", 3600)}),
    ("approval_expiry", {"approval_requirement": ApprovalRequirement("operator", 3599)}),
    ("approval_none", {"approval_requirement": None}),
    ("idempotency", {"idempotency_contract": Idempotency.NONE}),
    ("scheduling_timeout", {"scheduling_contract": SchedulingContract(16.0, 3, 1)}),
    ("scheduling_attempts", {"scheduling_contract": SchedulingContract(15.0, 2, 1)}),
    ("scheduling_budget", {"scheduling_contract": SchedulingContract(15.0, 3, 2)}),
    ("destination", {"destination": "other-bank"}),
    ("preconditions", {"protocol_preconditions": {"from_account": "email_draft"}}),
    ("outcomes", {"protocol_outcomes": {"completed": "sent"}}),
    ("normalizers", {"normalizers": {}}),
    ("reconciliation", {"reconciliation": Reconciliation.PRESENCE}),
]


@pytest.mark.parametrize("changes", [c for _, c in CHANGES], ids=[n for n, _ in CHANGES])
def test_fingerprint_changes_with_every_declared_field(changes: dict[str, Any]) -> None:
    changed = replace(BASE, **changes)
    assert changed.fingerprint != BASE.fingerprint
    assert DIGEST.match(changed.fingerprint)


def test_every_declared_field_is_covered_by_a_change() -> None:
    # `protocols` is not a field: the tables the preconditions name, covered above.
    assert set(BASE.declaration()) - {"protocols"} <= {next(iter(c)) for _, c in CHANGES}


def test_demo_contracts_have_distinct_fingerprints() -> None:
    prints = {f("fp").fingerprint for f in (email_send, payments_transfer, crm_lookup)}
    assert len(prints) == 3


def test_financial_write_without_external_write_is_refused() -> None:
    with pytest.raises(ValueError, match="external_write"):
        replace(BASE, possible_effects=frozenset({Effect.FINANCIAL_WRITE}))


def test_financial_write_with_external_write_is_accepted() -> None:
    contract = replace(BASE, possible_effects=frozenset({Effect.FINANCIAL_WRITE,
                                                         Effect.EXTERNAL_WRITE}))
    assert Effect.FINANCIAL_WRITE in contract.possible_effects


def test_unknown_normalizer_is_refused() -> None:
    with pytest.raises(ValueError, match="normalizer"):
        replace(BASE, normalizers={"amount": "no_such_normalizer"})


@pytest.mark.parametrize(
    ("idempotency", "safe"),
    [(Idempotency.NONE, False), (Idempotency.RECEIVER_DEDUP, True),
     (Idempotency.IDEMPOTENT, True)],
)
def test_retry_safety_follows_the_idempotency_contract(
    idempotency: Idempotency, safe: bool,
) -> None:
    assert replace(BASE, idempotency_contract=idempotency).retry_safe is safe


def test_requires_approval_follows_the_approval_requirement() -> None:
    assert email_send("fp").requires_approval
    assert not crm_lookup("fp").requires_approval


# --- the registry -------------------------------------------------------------------------------


def test_registration_is_idempotent_for_an_identical_contract() -> None:
    registry = ContractRegistry()
    first = registry.register(email_send("fp"))
    again = registry.register(email_send("fp"))
    assert again is first
    assert len(registry) == 1


@pytest.mark.parametrize(
    ("changes", "differences"),
    [
        ({"implementation_fingerprint": "fp2"}, ["implementation_fingerprint"]),
        ({"destination": "elsewhere", "approval_requirement": ApprovalRequirement("admin", 60)},
         ["approval_requirement", "destination"]),
        ({"input_type": {"type": "object"}, "possible_effects": frozenset({Effect.READ}),
          "scheduling_contract": SchedulingContract(1.0, 1, 1)},
         ["input_type", "possible_effects", "scheduling_contract"]),
        ({"idempotency_contract": Idempotency.IDEMPOTENT}, ["idempotency_contract"]),
    ],
    ids=["implementation", "two-fields", "three-fields", "idempotency"],
)
def test_second_registration_with_another_fingerprint_is_refused(
    changes: dict[str, Any], differences: list[str],
) -> None:
    registry = ContractRegistry()
    original = registry.register(email_send("fp"))
    with pytest.raises(ContractConflictError) as caught:
        registry.register(replace(email_send("fp"), **changes))
    assert caught.value.differences == differences
    for name in differences:
        assert name in str(caught.value)
    assert "email.send v1" in str(caught.value)
    # The checked contract stays registered, untouched.
    assert registry.resolve("email.send") is original
    assert len(registry) == 1


def test_registry_resolves_the_newest_version_unless_one_is_named() -> None:
    registry = ContractRegistry()
    v1 = registry.register(email_send("fp"))
    v3 = registry.register(replace(email_send("fp"), contract_version=3))
    v2 = registry.register(replace(email_send("fp"), contract_version=2))
    assert registry.resolve("email.send") is v3
    assert registry.resolve("email.send", 1) is v1
    assert registry.resolve("email.send", 2) is v2
    assert len(registry) == 3


@pytest.mark.parametrize(
    ("name", "version"),
    [("email.sendx", None), ("", None), ("email.send", 9), ("EMAIL.SEND", None),
     ("crm.lookup", None)],
)
def test_unknown_operation_is_refused(name: str, version: int | None) -> None:
    registry = ContractRegistry()
    registry.register(email_send("fp"))
    with pytest.raises(Denial) as caught:
        registry.resolve(name, version)
    assert caught.value.code is DenialCode.UNKNOWN_OPERATION
    assert caught.value.status == 404
    assert caught.value.details == {"operation": name}


def test_registry_finds_a_contract_by_fingerprint() -> None:
    registry = ContractRegistry()
    contract = registry.register(crm_lookup("fp"))
    assert registry.by_fingerprint(contract.fingerprint) is contract
    assert registry.by_fingerprint(crm_lookup("other").fingerprint) is None


def test_registry_iterates_in_name_and_version_order() -> None:
    registry = ContractRegistry()
    for contract in (payments_transfer("fp"), replace(email_send("fp"), contract_version=2),
                     crm_lookup("fp"), email_send("fp")):
        registry.register(contract)
    assert [(c.qualified_name, c.contract_version) for c in registry] == [
        ("crm.lookup", 1), ("email.send", 1), ("email.send", 2), ("payments.transfer", 1)]


# --- schema errors ------------------------------------------------------------------------------


RECIPIENTS = OperationContract(
    qualified_name="test.recipients",
    contract_version=1,
    implementation_fingerprint="fp",
    input_type={
        "type": "object",
        "additionalProperties": False,
        "required": ["to", "subject", "a/b", "c~d"],
        "properties": {
            "to": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "subject": {"type": "string"},
            "a/b": {"type": "integer"},
            "c~d": {"type": "integer"},
            "nested": {
                "type": "object",
                "additionalProperties": False,
                "required": ["inner"],
                "properties": {"inner": {"type": "integer"}},
            },
        },
    },
    output_type={},
    authority_requirements=(),
    possible_effects=frozenset({Effect.READ}),
)
VALID = {"to": ["a@example.com"], "subject": "hi", "a/b": 1, "c~d": 2}


def pointers(errors: list[dict[str, str]]) -> list[str]:
    return [e["pointer"] for e in errors]


def test_valid_arguments_have_no_schema_errors() -> None:
    assert RECIPIENTS.schema_errors(VALID) == []


def test_missing_member_is_reported_at_its_own_place() -> None:
    arguments = {k: v for k, v in VALID.items() if k != "to"}
    assert RECIPIENTS.schema_errors(arguments) == [
        {"pointer": "/arguments/to", "message": "is required"}]


def test_every_missing_member_is_reported() -> None:
    errors = RECIPIENTS.schema_errors({})
    assert pointers(errors) == ["/arguments/a~1b", "/arguments/c~0d", "/arguments/subject",
                                "/arguments/to"]
    assert {e["message"] for e in errors} == {"is required"}


def test_extra_member_is_reported_at_its_own_place() -> None:
    errors = RECIPIENTS.schema_errors({**VALID, "bcc": ["x@example.com"], "zz": 1})
    assert errors == [{"pointer": "/arguments/bcc", "message": "is not allowed"},
                      {"pointer": "/arguments/zz", "message": "is not allowed"}]


def test_extra_member_with_slash_and_tilde_is_escaped() -> None:
    errors = RECIPIENTS.schema_errors({**VALID, "x/y": 1, "p~q": 2})
    assert pointers(errors) == ["/arguments/p~0q", "/arguments/x~1y"]


def test_wrong_type_of_escaped_member_points_at_it() -> None:
    errors = RECIPIENTS.schema_errors({**VALID, "a/b": "one", "c~d": "two"})
    assert pointers(errors) == ["/arguments/a~1b", "/arguments/c~0d"]


def test_nested_errors_point_into_the_nested_member() -> None:
    assert RECIPIENTS.schema_errors({**VALID, "nested": {}}) == [
        {"pointer": "/arguments/nested/inner", "message": "is required"}]
    assert pointers(RECIPIENTS.schema_errors({**VALID, "nested": {"inner": 1, "x": 1}})) == [
        "/arguments/nested/x"]
    assert pointers(RECIPIENTS.schema_errors({**VALID, "nested": {"inner": "1"}})) == [
        "/arguments/nested/inner"]


def test_array_items_are_pointed_at_by_index() -> None:
    errors = RECIPIENTS.schema_errors({**VALID, "to": ["ok@example.com", 7]})
    assert pointers(errors) == ["/arguments/to/1"]


def test_wrong_root_type_points_at_the_root() -> None:
    errors = RECIPIENTS.schema_errors(["not", "an", "object"])
    assert pointers(errors) == ["/arguments"]


def test_schema_errors_are_sorted_and_all_reported() -> None:
    errors = RECIPIENTS.schema_errors({"to": [], "subject": 3, "a/b": 1, "c~d": 1, "zz": 0})
    assert pointers(errors) == sorted(pointers(errors))
    assert set(pointers(errors)) == {"/arguments/to", "/arguments/subject", "/arguments/zz"}


def test_schema_errors_take_another_root() -> None:
    validator = compile_schema(RECIPIENTS.input_type)
    errors = schema_errors(validator, {**VALID, "to": [1]}, root="/payload")
    assert pointers(errors) == ["/payload/to/0"]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, ["/arguments/draft"]),
        ({"draft": {"id": "res_1"}}, ["/arguments/draft/revision"]),
        ({"draft": {"id": "res_1", "revision": "1"}}, ["/arguments/draft/revision"]),
        ({"draft": {"id": "res_1", "revision": 0}}, ["/arguments/draft/revision"]),
        ({"draft": {"id": "res_1", "revision": 1, "payload": {}}},
         ["/arguments/draft/payload"]),
        ({"draft": {"id": "res_1", "revision": 1}, "to": ["x@example.com"]}, ["/arguments/to"]),
    ],
)
def test_email_send_schema_pointers(arguments: dict[str, Any], expected: list[str]) -> None:
    assert pointers(email_send("fp").schema_errors(arguments)) == expected


# --- the decimal_amount normalizer --------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "currency", "expected"),
    [
        ("10", "EUR", "10.00"),
        ("10.0", "EUR", "10.00"),
        ("10.00", "EUR", "10.00"),
        ("0.01", "EUR", "0.01"),
        ("1234567.89", "USD", "1234567.89"),
        ("10", "JPY", "10"),
        ("1", "KRW", "1"),
        ("10", "BHD", "10.000"),
        ("1.5", "BHD", "1.500"),
        ("1.234", "KWD", "1.234"),
    ],
)
def test_amount_is_canonicalized_to_the_currency_minor_units(
    amount: str, currency: str, expected: str,
) -> None:
    normalized = BASE.normalize(transfer_arguments(amount, currency))
    assert normalized["amount"] == expected
    assert normalized["currency"] == currency


def test_equal_amounts_make_equal_arguments() -> None:
    forms = [BASE.normalize(transfer_arguments(a)) for a in ("10", "10.0", "10.00")]
    assert forms[0] == forms[1] == forms[2]
    assert len({digest(f) for f in forms}) == 1


def test_normalize_does_not_mutate_its_input() -> None:
    arguments = transfer_arguments("10")
    BASE.normalize(arguments)
    assert arguments["amount"] == "10"


@pytest.mark.parametrize(
    ("amount", "currency"),
    [
        ("10.001", "EUR"),
        ("0.001", "USD"),
        ("10.5", "JPY"),
        ("1.2345", "BHD"),
        ("-5", "EUR"),
        ("-0.01", "EUR"),
        ("0", "EUR"),
        ("0.00", "EUR"),
        ("1e3", "EUR"),
        ("1E3", "EUR"),
        ("1e-2", "EUR"),
        ("NaN", "EUR"),
        ("Infinity", "EUR"),
        ("-Infinity", "EUR"),
        ("", "EUR"),
        ("ten", "EUR"),
        (" 10", "EUR"),
        ("10 ", "EUR"),
        (10, "EUR"),
        (10.5, "EUR"),
        (None, "EUR"),
        (True, "EUR"),
        ("10", "XXX"),
        ("10", "eur"),
        ("10", None),
        ("10", 978),
    ],
)
def test_bad_amount_is_schema_invalid_at_the_amount(amount: Any, currency: Any) -> None:
    with pytest.raises(Denial) as caught:
        BASE.normalize(transfer_arguments(amount, currency))
    assert caught.value.code is DenialCode.SCHEMA_INVALID
    assert caught.value.status == 422
    errors = caught.value.details["errors"]
    assert [e["pointer"] for e in errors] == ["/arguments/amount"]
    assert errors[0]["message"]


def test_too_many_places_names_the_currency_minor_units() -> None:
    with pytest.raises(Denial) as caught:
        BASE.normalize(transfer_arguments("10.001", "EUR"))
    message = caught.value.details["errors"][0]["message"]
    assert "EUR" in message
    assert "2" in message


@pytest.mark.parametrize(
    ("amount", "currency"),
    [("10.000", "EUR"), ("10.0", "JPY"), ("1.5000", "BHD")],
)
def test_more_places_than_minor_units_is_refused_even_when_zero(
    amount: str, currency: str,
) -> None:
    """docs/design.md#demo: "10", "10.0" and "10.00" are one EUR amount; "more places is
    schema_invalid"."""
    with pytest.raises(Denial) as caught:
        BASE.normalize(transfer_arguments(amount, currency))
    assert caught.value.code is DenialCode.SCHEMA_INVALID
    assert [e["pointer"] for e in caught.value.details["errors"]] == ["/arguments/amount"]


def test_missing_currency_refuses_the_amount() -> None:
    arguments = transfer_arguments("10")
    del arguments["currency"]
    with pytest.raises(Denial) as caught:
        BASE.normalize(arguments)
    assert [e["pointer"] for e in caught.value.details["errors"]] == ["/arguments/amount"]


# --- the evidence chain's fields (docs/design.md#evidence) ----------------------------------------

def _reading(**changes: Any) -> OperationContract:
    from demo.contracts import RESOURCE_REF

    base = replace(BASE, input_type={"type": "object", "properties": {
        "report": RESOURCE_REF, "attestation": {"type": "string"}}},
        protocol_preconditions={"report": "report"})
    return replace(base, **changes)


def test_a_contract_without_stage_3s_fields_declares_none_of_them() -> None:
    # So that contracts of stages 1 and 2 keep their fingerprints (test_fingerprint_is_pinned).
    assert {"reads", "evidence", "attestation"}.isdisjoint(BASE.declaration())


@pytest.mark.parametrize("changes", [
    {"reads": frozenset({"report"})},
    {"evidence": EvidenceRole.ATTESTATION},
    {"evidence": EvidenceRole.PUBLICATION},
    {"attestation": AttestationRequirement("attestation", "report", "cited-sources/1")},
], ids=["reads", "evidence", "evidence_other", "attestation"])
def test_stage_3s_fields_are_part_of_the_fingerprint(changes: dict[str, Any]) -> None:
    assert _reading(**changes).fingerprint != _reading().fingerprint
    needs = AttestationRequirement("attestation", "report", "cited-sources/1")
    assert _reading(attestation=needs).fingerprint != _reading(
        attestation=replace(needs, policy="cited-sources/2")).fingerprint


@pytest.mark.parametrize("changes", [
    {"reads": frozenset({"attestation"})},
    {"attestation": AttestationRequirement("attestation", "draft", "cited-sources/1")},
], ids=["reads_a_plain_argument", "attests_a_plain_argument"])
def test_stage_3s_fields_name_resource_arguments_only(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="not a resource argument"):
        _reading(**changes)
