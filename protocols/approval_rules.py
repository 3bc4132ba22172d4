"""Deployment approval rules (docs/design.md#approval-policies): `APPROVAL_RULES`, a list of
rules by operation and argument that raise an approval's quorum and cap the sum of an amount.

    [{"operation": "payments.transfer", "quorum": 2,
      "when": {"amount": {"gte": "10000.00"}, "currency": {"eq": "EUR"}}},
     {"operation": "payments.transfer", "when": {"currency": {"eq": "EUR"}},
      "cap": {"argument": "amount", "sum": "50000.00", "per": "day", "scope": "agent"}}]

Pure: parsed once when the runtime is built (a malformed rule is a `ValueError` naming where,
so a deployment never starts on a rule it misread), then checked against the registered
contracts' input schemas (`rules_problems`: an unknown operation or argument, a value the
argument could never hold, an amount rule of a contract that takes a `currency` without naming
one), applied to a proposal's arguments. A rule applies when every `when` condition holds; the
largest applicable quorum wins and a rule never lowers the contract's own. An argument a numeric
condition cannot compare (missing ones excepted) counts as meeting it: a rule errs toward more
approvals, never fewer.

Currencies. A rule on an amount names its currency (`"currency": {"eq": "CHF"}`), since an
amount means nothing without one. An action in a currency that no quorum rule of its operation
names is held to the largest quorum of that operation's rules, and one in a currency that no
cap of its operation sums is refused by the claim: choosing another currency never lowers the
bar.

A cap is charged by the claim (`cap_charges`): each applicable cap names one counter per
currency, agent or tenant and period, holding the sum in ten-thousandths (`CAP_PLACES`), so that
the store adds whole numbers exactly on every database. An amount that cannot be counted
(missing, negative, not a decimal) is refused, never counted as nothing.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any

from protocols.canonical import digest
from protocols.jsontypes import JSONObject
from protocols.schemas import compile_schema

#: The comparisons of a `when` condition; `eq` compares strings exactly, numbers as decimals.
COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "gte": operator.ge, "gt": operator.gt, "lte": operator.le, "lt": operator.lt,
    "eq": operator.eq,
}
#: The argument that names an amount's currency, in a contract that takes one.
CURRENCY = "currency"
PERIODS = {"hour": 3600, "day": 86400}
SCOPES = ("agent", "tenant")
_RULE_KEYS = frozenset({"operation", "when", "quorum", "cap"})
_CAP_KEYS = frozenset({"argument", "sum", "per", "scope"})
#: A cap's counter counts in units of 10**-CAP_PLACES: the finest minor unit of any ISO 4217
#: currency, so that every amount of every currency counts exactly.
CAP_PLACES = 4
_CAP_UNIT = Decimal(1).scaleb(-CAP_PLACES)
#: The largest sum a counter holds (a signed 64-bit integer of units).
_MAX_UNITS = 2**63 - 1
_WINDOWS = {"hour": "%Y%m%d%H", "day": "%Y%m%d"}


@dataclass(frozen=True)
class Condition:
    argument: str
    comparison: str  # a key of COMPARISONS
    value: Decimal | str

    def holds(self, arguments: Mapping[str, Any]) -> bool:
        if self.argument not in arguments:
            return False
        given = arguments[self.argument]
        if isinstance(self.value, str):
            return isinstance(given, str) and given == self.value
        number = _decimal(given)
        if number is None:
            return True  # not comparable: toward more approvals
        return COMPARISONS[self.comparison](number, self.value)

    def declaration(self) -> JSONObject:
        return {self.argument: {self.comparison: str(self.value)}}


@dataclass(frozen=True)
class Cap:
    """At most `total` of argument `argument` per `per` seconds, summed per agent or tenant."""

    argument: str
    total: Decimal
    per: str  # a key of PERIODS
    scope: str  # one of SCOPES

    def declaration(self) -> JSONObject:
        return {"argument": self.argument, "sum": str(self.total), "per": self.per,
                "scope": self.scope}


@dataclass(frozen=True)
class ApprovalRule:
    operation: str
    when: tuple[Condition, ...] = ()
    quorum: int | None = None
    cap: Cap | None = None

    def applies(self, operation: str, arguments: Mapping[str, Any]) -> bool:
        return operation == self.operation and all(c.holds(arguments) for c in self.when)

    @property
    def currency(self) -> str | None:
        """The currency the rule names (`"currency": {"eq": "CHF"}`), if any."""
        for condition in self.when:
            if condition.argument == CURRENCY and condition.comparison == "eq":
                return str(condition.value)
        return None

    @property
    def on_amount(self) -> bool:
        """Whether the rule weighs an amount: it compares an argument as a number, or caps a
        sum."""
        return self.cap is not None or any(c.comparison != "eq" for c in self.when)

    def declaration(self) -> JSONObject:
        """The rule as it is read back: what the policy fingerprint digests."""
        when: JSONObject = {}
        for condition in self.when:
            when.update(condition.declaration())
        return {"operation": self.operation,
                **({"when": when} if when else {}),
                **({"quorum": self.quorum} if self.quorum is not None else {}),
                **({"cap": self.cap.declaration()} if self.cap is not None else {})}


def rules_parse(raw: object) -> tuple[ApprovalRule, ...]:
    """`APPROVAL_RULES` as rules; ValueError naming the first thing wrong, by its position."""
    if not isinstance(raw, list):
        raise ValueError("APPROVAL_RULES must be a JSON list of rules")
    return tuple(_rule(item, f"APPROVAL_RULES[{index}]") for index, item in enumerate(raw))


def rules_for(rules: Iterable[ApprovalRule], operation: str) -> tuple[ApprovalRule, ...]:
    """The rules naming `operation`: those its policy fingerprint covers."""
    return tuple(rule for rule in rules if rule.operation == operation)


def quorum_for(base: int, rules: Iterable[ApprovalRule], operation: str,
               arguments: Mapping[str, Any]) -> int:
    """How many distinct approvers `operation` on `arguments` needs: the contract's `base`,
    raised by the largest quorum of an applicable rule; or, where the operation's quorum rules
    name currencies and none names the action's, by the largest quorum of them all."""
    mine = [rule for rule in rules_for(rules, operation) if rule.quorum is not None]
    if _unnamed_currency(mine, arguments):
        raised = [rule.quorum for rule in mine]
    else:
        raised = [rule.quorum for rule in mine if rule.applies(operation, arguments)]
    return max([base, *(quorum for quorum in raised if quorum is not None)])


def amount_raises_quorum(rules: Iterable[ApprovalRule], operation: str,
                         arguments: Mapping[str, Any]) -> bool:
    """Whether the amount `operation` on `arguments` moves raises its quorum under the rules:
    a quorum rule on an amount applies, or the action's currency is one those rules do not name
    (the console's "large amount")."""
    on_amount = [rule for rule in rules if any(c.comparison != "eq" for c in rule.when)]
    return quorum_for(1, on_amount, operation, arguments) > 1


def caps_for(rules: Iterable[ApprovalRule], operation: str,
             arguments: Mapping[str, Any]) -> tuple[Cap, ...]:
    """The spend caps that apply to `operation` on `arguments`."""
    return tuple(rule.cap for rule in rules
                 if rule.cap is not None and rule.applies(operation, arguments))


def _unnamed_currency(rules: Iterable[ApprovalRule], arguments: Mapping[str, Any]) -> bool:
    """Whether `rules` name currencies and none of them the action's."""
    named = {rule.currency for rule in rules} - {None}
    return bool(named) and arguments.get(CURRENCY) not in named


@dataclass(frozen=True)
class CapCharge:
    """What a claim takes from one cap's counter: `units` of at most `limit` (both in
    10**-CAP_PLACES), or, with `units` None, an amount it cannot count (the claim is refused)."""

    counter: str
    limit: int
    units: int | None
    rule: ApprovalRule
    #: The action's currency, where no cap of its operation sums it: nothing is counted, and
    #: the claim is refused (a cap sums one currency only).
    uncapped: str | None = None

    def declaration(self) -> JSONObject:
        """The cap as a refusal names it."""
        declared = self.rule.declaration()
        return {"operation": declared["operation"], **({"when": declared["when"]}
                                                        if "when" in declared else {}),
                **declared["cap"]}


def cap_charges(rules: Iterable[ApprovalRule], operation: str, arguments: Mapping[str, Any],
                *, agent: str, tenant: str, now: datetime) -> tuple[CapCharge, ...]:
    """The counters a claim of `operation` on `arguments` by `agent` of `tenant` at `now`
    charges, in key order; one per counter (two rules that sum the same thing in the same
    window share it, the smaller sum binds).

    A counter sums one thing: an argument of one operation in one currency under one `when`,
    per agent or per tenant, per UTC hour or day. Its key leaves the `sum` out, so a changed
    sum binds the window already counted at once. Where the operation's caps sum currencies and
    none the action's, the one charge is the refusal (`uncapped`)."""
    capped = [rule for rule in rules_for(rules, operation) if rule.cap is not None]
    if _unnamed_currency(capped, arguments):
        return (CapCharge(counter="", limit=0, units=None, rule=capped[0],
                          uncapped=str(arguments.get(CURRENCY))),)
    charges: dict[str, CapCharge] = {}
    for rule in capped:
        cap = rule.cap
        if cap is None or not rule.applies(operation, arguments):
            continue
        what = digest({"operation": rule.operation, "argument": cap.argument,
                       "when": rule.declaration().get("when", {})}).removeprefix("sha256:")
        who = agent if cap.scope == "agent" else tenant
        window = now.astimezone(UTC).strftime(_WINDOWS[cap.per])
        currency = rule.currency or "-"
        key = f"cap:{what[:24]}:{currency}:{cap.scope}:{who}:{window}"
        limit = cap_units(cap.total)
        assert limit is not None  # parsed: a non-negative decimal within CAP_PLACES
        charge = CapCharge(counter=key, limit=limit, units=cap_units(arguments.get(cap.argument)),
                           rule=rule)
        if key not in charges or limit < charges[key].limit:
            charges[key] = charge
    return tuple(charges[key] for key in sorted(charges))


def rules_problems(rules: Sequence[ApprovalRule],
                   inputs: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """What is wrong with each rule against the registered contracts, each problem naming the
    rule by its position and operation: `inputs` maps each registered operation to the input
    schemas of its versions. A rule names a registered operation; each argument it names is in
    every version's input schema (`properties`); each `eq` value is one that argument may hold;
    and, where a version takes a `currency`, a rule on an amount names the currency. Empty
    when every rule would apply as written."""
    problems: list[str] = []
    for index, rule in enumerate(rules):
        where = f"APPROVAL_RULES[{index}] ({rule.operation})"
        schemas = inputs.get(rule.operation)
        if not schemas:
            problems.append(f"{where}: no registered contract is named {rule.operation!r}")
            continue
        named: list[tuple[str, Condition | None]] = [(c.argument, c) for c in rule.when]
        if rule.cap is not None:
            named.append((rule.cap.argument, None))
        for schema in schemas:
            properties = schema.get("properties", {})
            for argument, condition in named:
                if argument not in properties:
                    problems.append(f"{where}: {argument!r} is not an argument of "
                                    f"{rule.operation} (its arguments: "
                                    f"{', '.join(sorted(properties))})")
                elif condition is not None and condition.comparison == "eq" and \
                        _invalid(properties[argument], condition.value):
                    problems.append(f"{where}: {argument!r} can never be "
                                    f"{condition.value!r}, which its schema refuses")
            if CURRENCY in properties and rule.on_amount and rule.currency is None:
                problems.append(f"{where}: a rule on an amount of {rule.operation}, which "
                                f"takes a currency, must name the currency: add, e.g., "
                                f"\"{CURRENCY}\": {{\"eq\": \"EUR\"}} to its \"when\"")
    return list(dict.fromkeys(problems))


def _invalid(schema: Mapping[str, Any], value: object) -> bool:
    return not compile_schema(schema).is_valid(value)


def cap_units(value: object) -> int | None:
    """`value`, a decimal or a decimal string, in units of 10**-CAP_PLACES, rounded up (an
    amount finer than that counts as more, never less); None for anything else, a negative
    amount, or more than a counter holds."""
    number = value if isinstance(value, Decimal) else _decimal(value)
    if number is None or not number.is_finite() or number < 0:
        return None
    units = int((number / _CAP_UNIT).to_integral_value(rounding=ROUND_CEILING))
    return units if units <= _MAX_UNITS else None


def _rule(item: object, where: str) -> ApprovalRule:
    if not isinstance(item, dict):
        raise ValueError(f"{where}: a rule is a JSON object")
    unknown = sorted(set(item) - _RULE_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; a rule has "
                         f"{', '.join(sorted(_RULE_KEYS))}")
    name = item.get("operation")
    if not isinstance(name, str) or "." not in name:
        raise ValueError(f"{where}.operation: the qualified name of an operation, "
                         "'<namespace>.<name>'")
    if "quorum" not in item and "cap" not in item:
        raise ValueError(f"{where}: a rule sets a quorum, a cap or both")
    quorum = item.get("quorum")
    if quorum is not None and (isinstance(quorum, bool) or not isinstance(quorum, int)
                               or not 1 <= quorum <= 10):
        raise ValueError(f"{where}.quorum: a whole number of approvers from 1 to 10")
    when = item.get("when", {})
    if not isinstance(when, dict):
        raise ValueError(f"{where}.when: an object of argument → {{comparison: value}}")
    conditions = tuple(_condition(argument, test, f"{where}.when.{argument}")
                       for argument, test in when.items())
    cap = item.get("cap")
    return ApprovalRule(operation=name, when=conditions, quorum=quorum,
                        cap=None if cap is None else _cap(cap, f"{where}.cap"))


def _condition(argument: str, test: object, where: str) -> Condition:
    if not isinstance(test, dict) or len(test) != 1:
        raise ValueError(f"{where}: one comparison, e.g. {{\"gte\": \"10000.00\"}}")
    [(comparison, value)] = test.items()
    if comparison not in COMPARISONS:
        raise ValueError(f"{where}: comparison {comparison!r} is not one of "
                         f"{', '.join(COMPARISONS)}")
    if not isinstance(value, str):
        raise ValueError(f"{where}.{comparison}: a decimal or a string, written as a JSON "
                         "string (\"10000.00\"), never a float")
    number = _decimal(value)
    if comparison != "eq":
        if number is None:
            raise ValueError(f"{where}.{comparison}: {value!r} is not a decimal")
        return Condition(argument, comparison, number)
    return Condition(argument, comparison, value)


def _cap(cap: object, where: str) -> Cap:
    if not isinstance(cap, dict) or set(cap) != _CAP_KEYS:
        raise ValueError(f"{where}: an object with exactly {', '.join(sorted(_CAP_KEYS))}")
    argument, total = cap["argument"], cap["sum"]
    if not isinstance(argument, str) or not argument:
        raise ValueError(f"{where}.argument: the name of the amount argument")
    number = _decimal(total) if isinstance(total, str) else None
    if number is None or number < 0:
        raise ValueError(f"{where}.sum: a non-negative decimal written as a JSON string")
    if number != number.quantize(_CAP_UNIT, rounding=ROUND_CEILING) or cap_units(number) is None:
        raise ValueError(f"{where}.sum: at most {CAP_PLACES} decimal places, and less than "
                         f"{Decimal(_MAX_UNITS).scaleb(-CAP_PLACES):.0f}")
    if cap["per"] not in PERIODS:
        raise ValueError(f"{where}.per: one of {', '.join(PERIODS)}")
    if cap["scope"] not in SCOPES:
        raise ValueError(f"{where}.scope: one of {', '.join(SCOPES)}")
    return Cap(argument=argument, total=number, per=cap["per"], scope=cap["scope"])


def _decimal(value: object) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    try:
        number = Decimal(value)
    except (InvalidOperation, ValueError):
        return None
    return number if number.is_finite() else None
