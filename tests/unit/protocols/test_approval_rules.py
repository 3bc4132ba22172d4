"""`APPROVAL_RULES` (docs/design.md#approval-policies): parsed strictly, applied to a snapshot's
arguments, never lowering a contract's quorum."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.approval_rules import (
    CapCharge,
    amount_raises_quorum,
    cap_charges,
    caps_for,
    quorum_for,
    rules_for,
    rules_parse,
    rules_problems,
)

FOUR_EYES = {"operation": "payments.transfer", "when": {"amount": {"gte": "10000.00"}},
             "quorum": 2}
CAP = {"operation": "payments.transfer",
       "cap": {"argument": "amount", "sum": "50000.00", "per": "day", "scope": "agent"}}


def test_the_design_examples_parse_and_read_back_as_written() -> None:
    eur = {"currency": {"eq": "EUR"}}
    examples = [{**FOUR_EYES, "when": {"amount": {"gte": "10000.00"}, **eur}},
                {**CAP, "when": eur}]
    rules = rules_parse(examples)
    assert [rule.declaration() for rule in rules] == examples
    assert rules[1].cap is not None and rules[1].cap.total == Decimal("50000.00")
    assert [rule.currency for rule in rules] == ["EUR", "EUR"]


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
    assert quorum_for(1, rules, "payments.transfer", {"amount": "99", "currency": "EUR"}) == 1
    # "eur" is not "EUR": a currency no rule names, held to the strictest rule.
    assert quorum_for(1, rules, "payments.transfer", {"amount": "1", "currency": "eur"}) == 2


def test_a_currency_no_rule_names_is_held_to_the_strictest_rule() -> None:
    rules = rules_parse([
        {"operation": "payments.transfer", "quorum": 2, "when": {
            "amount": {"gte": "10000"}, "currency": {"eq": "EUR"}}},
        {"operation": "payments.transfer", "quorum": 3, "when": {
            "amount": {"gte": "5000000"}, "currency": {"eq": "JPY"}}},
        {"operation": "email.send", "quorum": 4}])
    for amount, currency, quorum in (("9999.99", "EUR", 1), ("10000", "EUR", 2),
                                     ("1234567", "JPY", 1), ("5000000", "JPY", 3),
                                     ("9999.990", "KWD", 3), ("1", "CHF", 3), ("1", None, 3)):
        arguments = {"amount": amount, "currency": currency}
        assert quorum_for(1, rules, "payments.transfer", arguments) == quorum, currency
        assert amount_raises_quorum(rules, "payments.transfer", arguments) is (quorum > 1)


def test_a_cap_counts_one_currency_and_refuses_one_no_cap_sums() -> None:
    rules = rules_parse([{**CAP, "when": {"currency": {"eq": currency}}}
                         for currency in ("EUR", "JPY")])
    now = datetime(2026, 12, 7, tzinfo=UTC)

    def charges(currency: str) -> tuple[CapCharge, ...]:
        return cap_charges(rules, "payments.transfer", {"amount": "10", "currency": currency},
                           agent="a", tenant="t", now=now)

    [eur], [jpy] = charges("EUR"), charges("JPY")
    assert eur.counter != jpy.counter and ":EUR:" in eur.counter and ":JPY:" in jpy.counter
    assert eur.uncapped is None and eur.units == 10_0000
    [chf] = charges("CHF")
    assert (chf.uncapped, chf.units) == ("CHF", None)


def test_rules_are_checked_against_the_contracts_inputs() -> None:
    inputs = {"payments.transfer": [{"properties": {
        "amount": {"type": "string"}, "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "memo": {"type": "string"}}}], "email.send": [{"properties": {"draft": {}}}]}
    eur = {"currency": {"eq": "EUR"}}
    good = rules_parse([{**FOUR_EYES, "when": {"amount": {"gte": "1"}, **eur}},
                        {**CAP, "when": eur}, {"operation": "email.send", "quorum": 2},
                        {"operation": "payments.transfer", "quorum": 2,
                         "when": {"memo": {"eq": "urgent"}}}])
    assert rules_problems(good, inputs) == []
    wrong = rules_parse([{**FOUR_EYES, "operation": "payments.transfr"}, FOUR_EYES, CAP,
                         {**FOUR_EYES, "when": {"amout": {"gte": "1"}, **eur}},
                         {**FOUR_EYES, "when": {"amount": {"gte": "1"},
                                                "currency": {"eq": "eur"}}}])
    problems = rules_problems(wrong, inputs)
    assert [p.split(":")[0] for p in problems] == [
        f"APPROVAL_RULES[{i}] ({name})" for i, name in enumerate(
            ["payments.transfr", *["payments.transfer"] * 4])]
    assert "no registered contract" in problems[0]
    assert "must name the currency" in problems[1] and "must name the currency" in problems[2]
    assert "'amout' is not an argument" in problems[3]
    assert "can never be 'eur'" in problems[4]


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
