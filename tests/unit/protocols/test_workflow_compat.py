"""Contract compatibility (docs/design.md#extensions): what breaks callers, and why old approvals
never dispatch under a changed contract."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from demo.contracts import build_registry, crm_lookup, email_send, payments_transfer
from protocols.contracts import (
    ApprovalRequirement,
    AuthorityRequirement,
    ContractRegistry,
    Effect,
    Idempotency,
    OperationContract,
    Reconciliation,
    SchedulingContract,
)
from protocols.workflow import Level, classify_change, contract_from_declaration
from protocols.workflow.compat import render_text
from protocols.workflow.schema_compat import narrowings

EMAIL = email_send("impl-email-1")
PAY = payments_transfer("impl-bank-1")
CRM = crm_lookup("impl-crm-1")


def changed(contract: OperationContract, **fields: Any) -> OperationContract:
    return dataclasses.replace(contract, **fields)


def with_input(contract: OperationContract, edit: Callable[[dict[str, Any]], None]
               ) -> OperationContract:
    schema = json.loads(json.dumps(dict(contract.input_type)))
    edit(schema)
    return changed(contract, input_type=schema)


def test_identical_contract() -> None:
    result = classify_change(EMAIL, email_send("impl-email-1"))
    assert result.level is Level.IDENTICAL
    assert result.changes == ()
    assert result.resume_compatible


BREAKING: dict[str, tuple[OperationContract, OperationContract]] = {
    "adds authority": (EMAIL, changed(EMAIL, authority_requirements=(
        *EMAIL.authority_requirements, AuthorityRequirement("tenant", "/draft/payload/tenant")))),
    "moves authority": (PAY, changed(PAY, authority_requirements=(
        AuthorityRequirement("account", "/to_account"),))),
    "adds effects": (EMAIL, changed(EMAIL, possible_effects=frozenset(
        {Effect.EXTERNAL_WRITE, Effect.FINANCIAL_WRITE}))),
    "adds a required field": (PAY, with_input(PAY, lambda s: s["required"].append("memo"))),
    "narrows a type": (CRM, with_input(
        CRM, lambda s: s["properties"]["customer_id"].update(type="integer"))),
    "tightens a bound": (CRM, with_input(
        CRM, lambda s: s["properties"]["customer_id"].update(maxLength=8))),
    "changes a pattern": (PAY, with_input(
        PAY, lambda s: s["properties"]["currency"].update(pattern="^EUR$"))),
    "drops a property of a closed object": (PAY, with_input(
        PAY, lambda s: s["properties"].pop("memo"))),
    "changes a default": (PAY, with_input(
        PAY, lambda s: s["properties"]["memo"].update(default="refund"))),
    "changes protocol preconditions": (EMAIL, changed(EMAIL, protocol_preconditions={
        "draft": "report"})),
    "changes outcome states": (EMAIL, changed(EMAIL, protocol_outcomes={
        **EMAIL.protocol_outcomes, "unknown": "failed_no_effect"})),
    "adds an approval": (CRM, changed(
        CRM, approval_requirement=ApprovalRequirement("operator", 60))),
    "drops the approval": (EMAIL, changed(EMAIL, approval_requirement=None)),
    "changes the approver role": (EMAIL, changed(
        EMAIL, approval_requirement=ApprovalRequirement("admin", 3600))),
    "changes the approval expiry": (EMAIL, changed(
        EMAIL, approval_requirement=ApprovalRequirement("operator", 7200))),
    "weakens idempotency": (PAY, changed(PAY, idempotency_contract=Idempotency.NONE)),
    "lets lookups settle absence": (EMAIL, changed(
        EMAIL, reconciliation=Reconciliation.PRESENCE_AND_ABSENCE)),
    "lets lookups settle at all": (CRM, changed(CRM, reconciliation=Reconciliation.PRESENCE)),
    "changes the destination": (EMAIL, changed(EMAIL, destination="real_smtp")),
    "changes normalization": (PAY, changed(PAY, normalizers={})),
    "widens the output": (CRM, changed(CRM, output_type={"type": ["object", "null"]})),
    "renames the operation": (CRM, changed(CRM, qualified_name="crm.find")),
    "raises the budget cost": (CRM, changed(
        CRM, scheduling_contract=SchedulingContract(budget_cost=5))),
}


@pytest.mark.parametrize("name", sorted(BREAKING))
def test_breaking_changes(name: str) -> None:
    old, new = BREAKING[name]
    result = classify_change(old, new)
    assert result.level is Level.BREAKING, render_text(result)
    assert result.breaking and result.reasons
    assert not result.resume_compatible


COMPATIBLE: dict[str, tuple[OperationContract, OperationContract]] = {
    "drops an effect": (
        changed(CRM, possible_effects=frozenset({Effect.READ, Effect.HUMAN})), CRM),
    "adds an optional field": (PAY, with_input(
        PAY, lambda s: s["properties"].update(reference={"type": "string"}))),
    "drops a required field": (PAY, with_input(PAY, lambda s: s["required"].remove("currency"))),
    "loosens a bound": (CRM, with_input(
        CRM, lambda s: s["properties"]["customer_id"].update(maxLength=128))),
    "opens a closed object": (CRM, with_input(
        CRM, lambda s: s.update(additionalProperties=True))),
    "integer widened to number": (
        with_input(CRM, lambda s: s["properties"]["customer_id"].update(type="integer")),
        with_input(CRM, lambda s: s["properties"]["customer_id"].update(type="number"))),
    "strengthens idempotency": (PAY, changed(PAY, idempotency_contract=Idempotency.IDEMPOTENT)),
    "lookups settle less": (PAY, changed(PAY, reconciliation=Reconciliation.PRESENCE)),
    "new handler implementation": (EMAIL, email_send("impl-email-2")),
    "drops an authority key": (EMAIL, changed(EMAIL, authority_requirements=())),
    "narrows the output": (CRM, changed(CRM, output_type={
        "type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}})),
    "longer timeout": (EMAIL, changed(EMAIL, scheduling_contract=SchedulingContract(
        timeout=30.0))),
    "new version number": (CRM, changed(CRM, contract_version=2)),
}


@pytest.mark.parametrize("name", sorted(COMPATIBLE))
def test_compatible_changes(name: str) -> None:
    old, new = COMPATIBLE[name]
    result = classify_change(old, new)
    assert result.level is Level.COMPATIBLE, render_text(result)
    assert result.changes and not result.reasons
    assert not result.resume_compatible  # every change changes the fingerprint


@pytest.mark.parametrize("pair", [*BREAKING.values(), *COMPATIBLE.values()],
                         ids=[*BREAKING, *COMPATIBLE])
def test_pending_approval_under_old_fingerprint_cannot_dispatch_under_new(
        pair: tuple[OperationContract, OperationContract]) -> None:
    old, new = pair
    pending_fingerprint = old.fingerprint  # what a proposal (and its approval) made under OLD binds
    registry = ContractRegistry()
    registry.register(new)
    assert new.fingerprint != pending_fingerprint
    assert registry.by_fingerprint(pending_fingerprint) is None
    current = registry.resolve(new.qualified_name, new.contract_version)
    assert current.fingerprint != pending_fingerprint


def test_registry_refuses_a_changed_contract_under_the_same_version() -> None:
    registry = build_registry({"email.send": "impl-email-1", "payments.transfer": "b",
                               "crm.lookup": "c"})
    with pytest.raises(ValueError, match="already registered"):
        registry.register(BREAKING["adds effects"][1])


@pytest.mark.parametrize("contract", [EMAIL, PAY, CRM], ids=lambda c: c.qualified_name)
def test_declarations_round_trip(contract: OperationContract) -> None:
    data = json.loads(json.dumps(contract.declaration()))
    again = contract_from_declaration(data)
    assert again.fingerprint == contract.fingerprint
    assert classify_change(contract, again).level is Level.IDENTICAL


@pytest.mark.parametrize("data", [{}, {"qualified_name": 3}, [], {"qualified_name": "x"}])
def test_bad_declarations_are_value_errors(data: Any) -> None:
    with pytest.raises(ValueError, match="declaration"):
        contract_from_declaration(data)


def test_unknown_schema_keywords_count_as_narrowing() -> None:
    old = {"type": "object"}
    new = {"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}
    assert narrowings(old, new, "input") == ["input: anyOf changed (not comparable; treated "
                                              "as narrowing)"]
    assert narrowings(new, new, "input") == []
    assert narrowings(new, {}, "input") == []


def test_render_text_names_each_change_and_the_verdict() -> None:
    text = render_text(classify_change(*BREAKING["adds effects"]))
    assert "breaking: possible_effects: adds effects financial_write" in text
    assert "verdict: breaking" in text
    assert "pending approvals: cannot dispatch under the new contract" in text


STAGE_3 = build_registry({"research.fetch": "f", "evidence.attest": "a", "report.publish": "p"})


@pytest.mark.parametrize("contract", list(STAGE_3), ids=lambda c: c.qualified_name)
def test_stage_3_declarations_round_trip(contract: OperationContract) -> None:
    again = contract_from_declaration(json.loads(json.dumps(contract.declaration())))
    assert again == contract
    assert classify_change(contract, again).level is Level.IDENTICAL


@pytest.mark.parametrize("field", ["reads", "evidence", "attestation"])
def test_a_change_of_a_stage_3_field_is_breaking(field: str) -> None:
    publish = STAGE_3.resolve("report.publish")
    changed = {"reads": {"reads": frozenset({"report"})},
               "evidence": {"evidence": None},
               "attestation": {"attestation": None}}[field]
    result = classify_change(publish, replace(publish, **changed))
    assert result.level is Level.BREAKING
    assert [c.field for c in result.changes] == [field]
