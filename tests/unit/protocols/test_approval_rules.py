"""`APPROVAL_RULES` (docs/design.md#approval-policies): parsed strictly, applied to a snapshot's
arguments, never lowering a contract's quorum."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.approval_rules import caps_for, quorum_for, rules_for, rules_parse

FOUR_EYES = {"operation": "payments.transfer", "when": {"amount": {"gte": "10000.00"}},
             "quorum": 2}
CAP = {"operation": "payments.transfer",
       "cap": {"argument": "amount", "sum": "50000.00", "per": "day", "scope": "agent"}}


def test_the_design_examples_parse_and_read_back_as_written() -> None:
    rules = rules_parse([FOUR_EYES, CAP])
    assert [rule.declaration() for rule in rules] == [FOUR_EYES, CAP]
    assert rules[1].cap is not None and rules[1].cap.total == Decimal("50000.00")


@pytest.mark.parametrize(("amount", "quorum"), [
    ("9999.99", 1), ("10000.00", 2), ("10000", 2), ("99999.99", 2), ("0", 1)])
def test_a_rule_raises_the_quorum_at_its_threshold(amount: str, quorum: int) -> None:
    rules = rules_parse([FOUR_EYES])
    assert quorum_for(1, rules, "payments.transfer", {"amount": amount}) == quorum


def test_a_rule_applies_only_to_its_operation_and_the_largest_quorum_wins() -> None:
    rules = rules_parse([FOUR_EYES, {**FOUR_EYES, "when": {"amount": {"gt": "50000"}},
                                     "quorum": 3}])
    assert quorum_for(1, rules, "email.send", {"amount": "99999"}) == 1
    assert quorum_for(1, rules, "payments.transfer", {"amount": "20000"}) == 2
    assert quorum_for(1, rules, "payments.transfer", {"amount": "60000"}) == 3
    assert rules_for(rules, "email.send") == ()
    assert len(rules_for(rules, "payments.transfer")) == 2


def test_a_rule_never_lowers_the_contract_quorum() -> None:
    rules = rules_parse([FOUR_EYES])
    assert quorum_for(3, rules, "payments.transfer", {"amount": "20000"}) == 3


def test_every_condition_must_hold_and_eq_compares_strings_exactly() -> None:
    rules = rules_parse([{"operation": "payments.transfer", "quorum": 2, "when": {
        "amount": {"gte": "100"}, "currency": {"eq": "EUR"}}}])
    assert quorum_for(1, rules, "payments.transfer", {"amount": "100", "currency": "EUR"}) == 2
    assert quorum_for(1, rules, "payments.transfer", {"amount": "100", "currency": "eur"}) == 1
    assert quorum_for(1, rules, "payments.transfer", {"amount": "99", "currency": "EUR"}) == 1


@pytest.mark.parametrize("amount", ["lots", "NaN", "Infinity", 1.5e9, True, None, [1], {}])
def test_an_argument_a_number_cannot_be_read_from_counts_toward_more_approvals(
        amount: object) -> None:
    rules = rules_parse([FOUR_EYES])
    assert quorum_for(1, rules, "payments.transfer", {"amount": amount}) == 2


def test_a_missing_argument_does_not_meet_a_condition() -> None:
    assert quorum_for(1, rules_parse([FOUR_EYES]), "payments.transfer", {}) == 1


def test_caps_apply_by_their_conditions() -> None:
    capped = {**CAP, "when": {"currency": {"eq": "EUR"}}}
    rules = rules_parse([capped])
    assert len(caps_for(rules, "payments.transfer", {"currency": "EUR"})) == 1
    assert caps_for(rules, "payments.transfer", {"currency": "USD"}) == ()


@pytest.mark.parametrize(("raw", "where"), [
    ({"operation": "payments.transfer"}, "APPROVAL_RULES must be a JSON list"),
    ([{"operation": "payments.transfer"}], "APPROVAL_RULES[0]: a rule sets a quorum"),
    ([FOUR_EYES, "x"], "APPROVAL_RULES[1]: a rule is a JSON object"),
    ([{**FOUR_EYES, "quroum": 2}], "unknown key(s) quroum"),
    ([{**FOUR_EYES, "operation": "transfer"}], "APPROVAL_RULES[0].operation"),
    ([{**FOUR_EYES, "quorum": 0}], "APPROVAL_RULES[0].quorum"),
    ([{**FOUR_EYES, "quorum": True}], "APPROVAL_RULES[0].quorum"),
    ([{**FOUR_EYES, "quorum": "2"}], "APPROVAL_RULES[0].quorum"),
    ([{**FOUR_EYES, "when": {"amount": {"gte": 10000.0}}}], "never a float"),
    ([{**FOUR_EYES, "when": {"amount": {"gte": "ten"}}}], "'ten' is not a decimal"),
    ([{**FOUR_EYES, "when": {"amount": {"between": "1"}}}], "'between' is not one of"),
    ([{**FOUR_EYES, "when": {"amount": {"gte": "1", "lte": "2"}}}], "one comparison"),
    ([{**CAP, "cap": {"argument": "amount", "sum": "-1", "per": "day", "scope": "agent"}}],
     "APPROVAL_RULES[0].cap.sum"),
    ([{**CAP, "cap": {"argument": "amount", "sum": "1", "per": "week", "scope": "agent"}}],
     "APPROVAL_RULES[0].cap.per"),
    ([{**CAP, "cap": {"argument": "amount", "sum": "1", "per": "day"}}],
     "APPROVAL_RULES[0].cap: an object with exactly"),
])
def test_a_malformed_rule_is_refused_naming_where(raw: object, where: str) -> None:
    with pytest.raises(ValueError) as refused:
        rules_parse(raw)
    assert where in str(refused.value)


@given(base=st.integers(1, 10), amounts=st.decimals(allow_nan=False, allow_infinity=False,
                                                    places=2, min_value=-10**9,
                                                    max_value=10**9))
def test_quorum_is_never_below_the_contract_and_grows_with_the_amount(
        base: int, amounts: Decimal) -> None:
    rules = rules_parse([FOUR_EYES])
    here = quorum_for(base, rules, "payments.transfer", {"amount": str(amounts)})
    more = quorum_for(base, rules, "payments.transfer", {"amount": str(amounts + 1)})
    assert base <= here <= more
