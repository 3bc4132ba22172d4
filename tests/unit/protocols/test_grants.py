"""Authority grants: scope parsing, liveness, and `authorize` in its documented order."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any

import pytest

from protocols.denials import DenialCode
from protocols.grants import (
    ANY,
    Grant,
    Policy,
    Scope,
    grant_is_live,
    parse_scope,
    scope_as_json,
)
from tests.unit.protocols.grant_helpers import (
    NOW,
    SALES,
    SUPPORT,
    FixedClock,
    at,
    check,
    denial_of,
    make_grant,
)


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


# parse_scope ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"mailbox": [SUPPORT]}, {"mailbox": frozenset({SUPPORT})}),
        ({"mailbox": [SUPPORT, SALES, SUPPORT]}, {"mailbox": frozenset({SUPPORT, SALES})}),
        ({"customer": "*"}, {"customer": ANY}),
        ({"customer": ["*"]}, {"customer": ANY}),
        ({"customer": ["*", "*"]}, {"customer": ANY}),
        ({"account": ("acct-001",)}, {"account": frozenset({"acct-001"})}),
        ({}, {}),
        (
            {"mailbox": [SUPPORT], "account": ["acct-001"], "customer": "*"},
            {"mailbox": frozenset({SUPPORT}), "account": frozenset({"acct-001"}), "customer": ANY},
        ),
    ],
)
def test_parse_scope_accepts_json_forms(raw: Mapping[str, Any], expected: Scope) -> None:
    assert parse_scope(raw) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (["mailbox"], "JSON object"),
        ("mailbox", "JSON object"),
        (None, "JSON object"),
        ({"mailbox": SUPPORT}, "'\\*' or a list of strings"),
        ({"mailbox": 7}, "'\\*' or a list of strings"),
        ({"mailbox": None}, "'\\*' or a list of strings"),
        ({"mailbox": {"value": SUPPORT}}, "'\\*' or a list of strings"),
        ({"mailbox": []}, "allows nothing"),
        ({"mailbox": [SUPPORT, 7]}, "non-empty strings"),
        ({"mailbox": [""]}, "non-empty strings"),
        ({"mailbox": [{"x": 1}]}, "non-empty strings"),
        ({"mailbox": [["nested"]]}, "non-empty strings"),
        ({"mailbox": ["*", SUPPORT]}, "mixes"),
        ({"": "*"}, "keys must be non-empty strings"),
        ({7: "*"}, "keys must be non-empty strings"),
    ],
)
def test_parse_scope_refuses_bad_shapes(raw: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_scope(raw)


def test_scope_round_trips_through_json() -> None:
    raw = {"customer": "*", "mailbox": [SUPPORT, SALES]}
    assert scope_as_json(parse_scope(raw)) == {"customer": "*", "mailbox": [SALES, SUPPORT]}
    assert parse_scope(scope_as_json(parse_scope(raw))) == parse_scope(raw)


# Grant and Policy -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["not_before", "expires_at", "revoked_at"])
def test_grant_refuses_naive_datetimes(name: str) -> None:
    fields: dict[str, Any] = {name: datetime(2030, 1, 1, 12, 0)}
    with pytest.raises(ValueError, match=f"{name} must be timezone-aware"):
        make_grant(**fields)


@pytest.mark.parametrize(
    "scope",
    [
        {"mailbox": SUPPORT},
        {"mailbox": [SUPPORT]},
        {"mailbox": frozenset({"*", SUPPORT})},
        {"mailbox": frozenset({""})},
        {"": ANY},
    ],
)
def test_grant_refuses_malformed_scope(scope: Any) -> None:
    with pytest.raises(ValueError, match="scope"):
        Grant(
            id="grt_owner", issuer="admin", subject="owner", operations=frozenset({"email.send"}),
            scope=scope, not_before=None, expires_at=None, revoked_at=None, parent_id=None,
        )


@pytest.mark.parametrize("operations", ["email.send", ["email.send"], {"email.send"}])
def test_grant_refuses_operations_that_are_not_a_frozenset(operations: Any) -> None:
    with pytest.raises(TypeError, match="frozenset"):
        Grant(
            id="grt_owner", issuer="admin", subject="owner", operations=operations,
            scope={}, not_before=None, expires_at=None, revoked_at=None, parent_id=None,
        )


def test_grant_refuses_empty_operation_name() -> None:
    with pytest.raises(ValueError, match="operation names"):
        make_grant(operations=[""])


def test_grant_scope_cannot_be_changed_through_the_callers_dict() -> None:
    raw: dict[str, Any] = {"mailbox": frozenset({SUPPORT})}
    grant = Grant(
        id="grt_owner", issuer="admin", subject="owner", operations=frozenset({"email.send"}),
        scope=raw, not_before=None, expires_at=None, revoked_at=None, parent_id=None,
    )
    raw["mailbox"] = ANY
    assert grant.scope == {"mailbox": frozenset({SUPPORT})}
    assert isinstance(grant.scope, MappingProxyType)


def test_grants_are_hashable_and_compare_by_value() -> None:
    assert make_grant() == make_grant()
    assert len({make_grant(), make_grant()}) == 1
    assert make_grant() != make_grant(scope={"mailbox": [SALES]})


def test_permissive_policy_allows_the_usual_effects() -> None:
    policy = Policy.permissive()
    assert policy.allowed_effects == {"read", "external_write", "financial_write", "human"}
    assert policy.denied_operations == frozenset()


# grant_is_live ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grant", "now", "live"),
    [
        (make_grant(), NOW, True),
        (make_grant(expires_at=at(10)), at(9), True),
        (make_grant(expires_at=at(10)), at(10), False),
        (make_grant(expires_at=at(10)), at(11), False),
        (make_grant(not_before=at(5)), at(5), True),
        (make_grant(not_before=at(5)), at(4), False),
        (make_grant(revoked_at=at(-1)), NOW, False),
        (make_grant(revoked_at=at(60)), NOW, False),
    ],
)
def test_grant_is_live(grant: Grant, now: datetime, live: bool) -> None:
    assert grant_is_live(grant, now) is live


def test_grant_is_live_refuses_naive_now() -> None:
    with pytest.raises(ValueError, match="now must be timezone-aware"):
        grant_is_live(make_grant(), datetime(2030, 1, 1))


# authorize: the happy paths ---------------------------------------------------------------------


def test_live_grant_with_covering_scope_authorizes() -> None:
    grant = make_grant()
    assert check([grant]) is grant


@pytest.mark.parametrize(
    ("operations", "scope"),
    [
        (["*"], {"mailbox": [SUPPORT]}),
        (["email.send"], {"mailbox": "*"}),
        (["email.send", "crm.lookup"], {"mailbox": [SALES, SUPPORT]}),
        (["email.send"], {"mailbox": [SUPPORT], "account": ["acct-001"]}),
    ],
)
def test_wildcards_and_extra_keys_still_authorize(
    operations: list[str], scope: Mapping[str, Any]
) -> None:
    grant = make_grant(operations=operations, scope=scope)
    assert check([grant]) is grant


def test_contract_without_resource_scope_needs_no_scope_in_the_grant() -> None:
    grant = make_grant(operations=["crm.lookup"], scope={})
    assert check([grant], operation="crm.lookup", effects=frozenset({"read"}), selected={}) is grant


def test_every_selected_key_must_be_covered() -> None:
    grant = make_grant(scope={"mailbox": [SUPPORT], "account": ["acct-001"]})
    selected = {"mailbox": SUPPORT, "account": "acct-001"}
    assert check([grant], selected=selected) is grant


def test_authority_holds_until_just_before_expiry(clock: FixedClock) -> None:
    grant = make_grant(not_before=clock.now, expires_at=at(10))
    assert check([grant], now=clock.now) is grant
    assert check([grant], now=clock.advance(minutes=10, microseconds=-1)) is grant
    assert denial_of([grant], now=clock.advance(microseconds=1)).code == (
        DenialCode.AUTHORITY_EXPIRED
    )


# authorize: multi-grant selection --------------------------------------------------------------


def test_first_live_covering_grant_is_chosen() -> None:
    first = make_grant(id="grt_1")
    second = make_grant(id="grt_2", scope={"mailbox": "*"})
    assert check([first, second]) is first
    assert check([second, first]) is second


def test_second_grant_authorizes_when_the_first_does_not_cover() -> None:
    other_operation = make_grant(id="grt_1", operations=["crm.lookup"])
    other_subject = make_grant(id="grt_2", subject="outsider")
    revoked = make_grant(id="grt_3", revoked_at=at(-1))
    expired = make_grant(id="grt_4", expires_at=at(-1))
    wrong_scope = make_grant(id="grt_5", scope={"mailbox": [SALES]})
    good = make_grant(id="grt_6")
    grants = [other_operation, other_subject, revoked, expired, wrong_scope, good]
    assert check(grants) is good


def test_grants_accept_any_iterable() -> None:
    grant = make_grant()
    assert check(iter([grant])) is grant
    assert check(g for g in [grant]) is grant


# authorize: each denial, in order --------------------------------------------------------------


def test_operation_outside_the_tool_set_is_not_permitted() -> None:
    denial = denial_of([make_grant()], tool_set=frozenset({"crm.lookup"}))
    assert denial.code == DenialCode.TOOL_NOT_PERMITTED
    assert denial.details == {"operation": "email.send"}


def test_tool_set_is_checked_before_policy() -> None:
    policy = Policy(allowed_effects=frozenset(), denied_operations=frozenset({"email.send"}))
    denial = denial_of([], tool_set=frozenset(), policy=policy)
    assert denial.code == DenialCode.TOOL_NOT_PERMITTED


def test_operation_denied_by_policy_is_refused_even_with_a_grant() -> None:
    policy = Policy(
        allowed_effects=frozenset({"external_write"}),
        denied_operations=frozenset({"email.send"}),
    )
    denial = denial_of([make_grant()], policy=policy)
    assert denial.code == DenialCode.EFFECT_NOT_PERMITTED
    assert denial.details == {"operation": "email.send", "effects": ["external_write"]}


def test_effects_beyond_policy_are_refused_with_the_offending_effects() -> None:
    policy = Policy(allowed_effects=frozenset({"read", "external_write"}))
    grant = make_grant(operations=["payments.transfer"], scope={"account": ["acct-001"]})
    denial = denial_of(
        [grant],
        operation="payments.transfer",
        effects=frozenset({"external_write", "financial_write", "human"}),
        selected={"account": "acct-001"},
        policy=policy,
    )
    assert denial.code == DenialCode.EFFECT_NOT_PERMITTED
    assert denial.details == {"effects": ["financial_write", "human"]}


def test_policy_is_checked_before_grants() -> None:
    policy = Policy(allowed_effects=frozenset({"read"}))
    assert denial_of([], policy=policy).code == DenialCode.EFFECT_NOT_PERMITTED


def test_no_effects_need_no_policy() -> None:
    grant = make_grant()
    policy = Policy(allowed_effects=frozenset())
    assert check([grant], effects=frozenset(), policy=policy) is grant


@pytest.mark.parametrize(
    ("scope", "selected", "key", "value"),
    [
        ({"mailbox": [SALES]}, {"mailbox": SUPPORT}, "mailbox", SUPPORT),
        ({"account": "*"}, {"mailbox": SUPPORT}, "mailbox", SUPPORT),
        ({}, {"mailbox": SUPPORT}, "mailbox", SUPPORT),
        (
            {"mailbox": [SUPPORT], "account": ["acct-001"]},
            {"mailbox": SUPPORT, "account": "acct-002"},
            "account",
            "acct-002",
        ),
        ({"mailbox": "*"}, {"mailbox": SUPPORT, "account": "acct-001"}, "account", "acct-001"),
    ],
)
def test_live_grant_outside_its_scope_is_a_scope_violation(
    scope: Mapping[str, Any], selected: Mapping[str, str], key: str, value: str
) -> None:
    denial = denial_of([make_grant(scope=scope)], selected=selected)
    assert denial.code == DenialCode.SCOPE_VIOLATION
    assert denial.details == {"key": key, "value": value}


def test_scope_violation_names_the_first_failing_grant_and_key() -> None:
    first = make_grant(id="grt_1", scope={"account": ["acct-001"], "mailbox": [SUPPORT]})
    second = make_grant(id="grt_2", scope={"account": ["acct-002"], "mailbox": [SUPPORT]})
    denial = denial_of([first, second], selected={"mailbox": SALES, "account": "acct-002"})
    assert denial.details == {"key": "account", "value": "acct-002"}


def test_a_value_covered_only_by_a_revoked_grant_is_authority_revoked() -> None:
    """docs/design.md#denials: the denial says what happened to the grant that covered the value,
    even beside a live grant of another scope."""
    wrong_scope = make_grant(id="grt_1", scope={"mailbox": [SALES]})
    revoked = make_grant(id="grt_2", revoked_at=at(-1))
    expired = make_grant(id="grt_3", expires_at=at(-1))
    assert denial_of([revoked, expired, wrong_scope]).code == DenialCode.AUTHORITY_REVOKED
    assert denial_of([expired, wrong_scope]).code == DenialCode.AUTHORITY_EXPIRED


def test_scope_violation_only_when_no_grant_live_or_not_covers_the_value() -> None:
    wrong_scope = make_grant(id="grt_1", scope={"mailbox": [SALES]})
    revoked_elsewhere = make_grant(id="grt_2", scope={"mailbox": [SALES]}, revoked_at=at(-1))
    expired_elsewhere = make_grant(id="grt_3", scope={"mailbox": [SALES]}, expires_at=at(-1))
    denial = denial_of([revoked_elsewhere, expired_elsewhere, wrong_scope])
    assert denial.code == DenialCode.SCOPE_VIOLATION
    assert denial.details == {"key": "mailbox", "value": SUPPORT}


@pytest.mark.parametrize("revoked_at", [at(-60), NOW, at(60)])
def test_revoked_grant_is_refused_whenever_it_was_revoked(revoked_at: datetime) -> None:
    denial = denial_of([make_grant(revoked_at=revoked_at)])
    assert denial.code == DenialCode.AUTHORITY_REVOKED
    assert denial.details == {"operation": "email.send"}


def test_revocation_outranks_expiry() -> None:
    expired = make_grant(id="grt_1", expires_at=at(-1))
    revoked_and_expired = make_grant(id="grt_2", expires_at=at(-1), revoked_at=at(-2))
    assert denial_of([expired, revoked_and_expired]).code == DenialCode.AUTHORITY_REVOKED


def test_revoked_grant_with_wrong_scope_is_a_scope_violation() -> None:
    """It never covered the value: revoking it changed nothing for this action."""
    grant = make_grant(scope={"mailbox": [SALES]}, revoked_at=at(-1))
    assert denial_of([grant]).code == DenialCode.SCOPE_VIOLATION


@pytest.mark.parametrize(
    ("not_before", "expires_at"),
    [
        (None, NOW),
        (None, at(-1)),
        (at(-60), NOW),
        (at(1), None),
        (at(1), at(60)),
    ],
)
def test_grant_outside_its_validity_interval_is_expired(
    not_before: datetime | None, expires_at: datetime | None
) -> None:
    denial = denial_of([make_grant(not_before=not_before, expires_at=expires_at)])
    assert denial.code == DenialCode.AUTHORITY_EXPIRED
    assert denial.details == {"operation": "email.send"}


@pytest.mark.parametrize(
    "grants",
    [
        [],
        [make_grant(subject="outsider")],
        [make_grant(subject="approver")],
        [make_grant(operations=["crm.lookup", "payments.transfer"])],
        [make_grant(subject="outsider", revoked_at=at(-1))],
        [make_grant(operations=["crm.lookup"], expires_at=at(-1))],
    ],
)
def test_without_a_matching_grant_authority_is_missing(grants: list[Grant]) -> None:
    denial = denial_of(grants)
    assert denial.code == DenialCode.AUTHORITY_MISSING
    assert denial.details == {"operation": "email.send"}


def test_another_subjects_grant_does_not_lend_authority() -> None:
    grant = make_grant(subject="owner")
    assert check([grant], subject="owner") is grant
    assert denial_of([grant], subject="outsider").code == DenialCode.AUTHORITY_MISSING


def test_authorize_refuses_naive_now() -> None:
    with pytest.raises(ValueError, match="now must be timezone-aware"):
        check([make_grant()], now=datetime(2030, 1, 1))


def test_denials_carry_their_http_status() -> None:
    assert denial_of([]).status == 403
    assert denial_of([]).as_body()["error"]["code"] == "authority_missing"
