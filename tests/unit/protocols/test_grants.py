"""Authority grants: scope parsing, `authorize` in its documented order, `delegate` narrowing."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.denials import Denial, DenialCode
from protocols.grants import (
    ANY,
    Grant,
    Policy,
    Scope,
    authorize,
    delegate,
    grant_is_live,
    is_narrower_or_equal,
    parse_scope,
    scope_as_json,
    with_ancestry,
)

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
SUPPORT = "support@acme.example"
SALES = "sales@acme.example"
TOOLS = frozenset({"email.send", "payments.transfer", "crm.lookup"})
SEND_EFFECTS = frozenset({"external_write"})


def at(minutes: int) -> datetime:
    return NOW + timedelta(minutes=minutes)


@dataclass
class FixedClock:
    """An injectable clock: it only moves when told to."""

    now: datetime = NOW

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


def make_grant(
    *,
    id: str = "grt_owner",
    issuer: str = "admin",
    subject: str = "owner",
    operations: Iterable[str] = ("email.send",),
    scope: Mapping[str, Any] | None = None,
    not_before: datetime | None = None,
    expires_at: datetime | None = None,
    revoked_at: datetime | None = None,
    parent_id: str | None = None,
) -> Grant:
    return Grant(
        id=id,
        issuer=issuer,
        subject=subject,
        operations=frozenset(operations),
        scope=parse_scope({"mailbox": [SUPPORT]} if scope is None else scope),
        not_before=not_before,
        expires_at=expires_at,
        revoked_at=revoked_at,
        parent_id=parent_id,
    )


def check(
    grants: Iterable[Grant],
    *,
    subject: str = "owner",
    operation: str = "email.send",
    effects: frozenset[str] = SEND_EFFECTS,
    selected: Mapping[str, str] | None = None,
    tool_set: frozenset[str] = TOOLS,
    policy: Policy | None = None,
    now: datetime = NOW,
) -> Grant:
    return authorize(
        grants=grants,
        subject=subject,
        operation=operation,
        effects=effects,
        selected={"mailbox": SUPPORT} if selected is None else selected,
        tool_set=tool_set,
        policy=Policy.permissive() if policy is None else policy,
        now=now,
    )


def denial_of(grants: Iterable[Grant], **kwargs: Any) -> Denial:
    with pytest.raises(Denial) as caught:
        check(grants, **kwargs)
    return caught.value


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


# delegate ---------------------------------------------------------------------------------------


def owner_grant(**overrides: Any) -> Grant:
    fields: dict[str, Any] = {
        "id": "grt_owner",
        "operations": ["email.send", "crm.lookup"],
        "scope": {"mailbox": [SUPPORT, SALES], "customer": "*"},
        "not_before": at(-60),
        "expires_at": at(60),
    }
    fields.update(overrides)
    return make_grant(**fields)


def delegate_to_approver(parent: Grant, **overrides: Any) -> Grant:
    request: dict[str, Any] = {
        "id": "grt_approver",
        "issuer": "owner",
        "subject": "approver",
        "operations": ["email.send"],
        "scope": parse_scope({"mailbox": [SUPPORT]}),
        "expires_at": at(30),
        "now": NOW,
    }
    request.update(overrides)
    return delegate(parent, **request)


def widening_of(parent: Grant, **overrides: Any) -> dict[str, Any]:
    with pytest.raises(Denial) as caught:
        delegate_to_approver(parent, **overrides)
    assert caught.value.code == DenialCode.DELEGATION_WIDENS
    return caught.value.details


def test_narrower_delegation_makes_a_child_grant() -> None:
    parent = owner_grant()
    child = delegate_to_approver(parent)
    assert child == Grant(
        id="grt_approver",
        issuer="owner",
        subject="approver",
        operations=frozenset({"email.send"}),
        scope={"mailbox": frozenset({SUPPORT})},
        not_before=NOW,
        expires_at=at(30),
        revoked_at=None,
        parent_id="grt_owner",
    )
    assert is_narrower_or_equal(child, parent)


def test_delegated_grant_authorizes_its_subject() -> None:
    child = delegate_to_approver(owner_grant())
    assert check([child], subject="approver") is child
    denial = denial_of([child], subject="approver", selected={"mailbox": SALES})
    assert denial.code == DenialCode.SCOPE_VIOLATION


def test_equal_delegation_is_allowed() -> None:
    parent = owner_grant()
    child = delegate_to_approver(
        parent,
        operations=parent.operations,
        scope=parent.scope,
        expires_at=parent.expires_at,
    )
    assert child.operations == parent.operations
    assert child.scope == parent.scope
    assert child.expires_at == parent.expires_at


@pytest.mark.parametrize(
    ("parent_operations", "child_operations"),
    [
        (["*"], ["payments.transfer"]),
        (["*"], ["*"]),
        (["*"], ["*", "email.send"]),
        (["email.send", "crm.lookup"], ["crm.lookup"]),
    ],
)
def test_operations_may_narrow(parent_operations: list[str], child_operations: list[str]) -> None:
    parent = owner_grant(operations=parent_operations)
    child = delegate_to_approver(parent, operations=child_operations)
    assert child.operations == frozenset(child_operations)


@pytest.mark.parametrize(
    ("child_operations", "widened"),
    [
        (["payments.transfer"], ["payments.transfer"]),
        (["email.send", "payments.transfer"], ["payments.transfer"]),
        (["*"], ["*"]),
        (["*", "email.send"], ["*"]),
    ],
)
def test_second_operation_outside_the_parent_widens(
    child_operations: list[str], widened: list[str]
) -> None:
    assert widening_of(owner_grant(), operations=child_operations) == {"operations": widened}


@pytest.mark.parametrize(
    ("parent_scope", "child_scope"),
    [
        ({"mailbox": "*"}, {"mailbox": "*"}),
        ({"mailbox": "*"}, {"mailbox": [SALES]}),
        ({"mailbox": [SUPPORT, SALES]}, {"mailbox": [SALES]}),
        ({"mailbox": [SUPPORT], "customer": "*"}, {"mailbox": [SUPPORT]}),
        ({"mailbox": [SUPPORT], "customer": ["c-1"]}, {"mailbox": [SUPPORT]}),
        ({"mailbox": [SUPPORT]}, {}),
    ],
)
def test_scope_may_narrow_or_drop_keys(
    parent_scope: Mapping[str, Any], child_scope: Mapping[str, Any]
) -> None:
    parent = owner_grant(scope=parent_scope)
    child = delegate_to_approver(parent, scope=parse_scope(child_scope))
    assert child.scope == parse_scope(child_scope)


def test_child_scope_may_be_an_empty_set() -> None:
    child = delegate_to_approver(owner_grant(), scope={"mailbox": frozenset()})
    assert denial_of([child], subject="approver").code == DenialCode.SCOPE_VIOLATION


@pytest.mark.parametrize(
    ("parent_scope", "child_scope", "widened"),
    [
        ({"mailbox": [SUPPORT]}, {"mailbox": [SUPPORT, SALES]}, {"mailbox": [SALES]}),
        ({"mailbox": [SUPPORT]}, {"mailbox": "*"}, {"mailbox": "*"}),
        ({"mailbox": [SUPPORT]}, {"mailbox": [SUPPORT], "account": ["a-1"]}, {"account": ["a-1"]}),
        ({"mailbox": [SUPPORT]}, {"mailbox": [SUPPORT], "account": "*"}, {"account": "*"}),
        (
            {"mailbox": [SUPPORT], "account": ["a-1"]},
            {"mailbox": "*", "account": ["a-1", "a-2"]},
            {"mailbox": "*", "account": ["a-2"]},
        ),
    ],
)
def test_second_scope_value_outside_the_parent_widens(
    parent_scope: Mapping[str, Any], child_scope: Mapping[str, Any], widened: dict[str, Any]
) -> None:
    parent = owner_grant(scope=parent_scope)
    details = widening_of(parent, scope=parse_scope(child_scope))
    assert details == {"scope": widened}


def test_adding_a_key_the_parent_lacks_would_grant_new_authority() -> None:
    parent = owner_grant(operations=["*"], scope={"mailbox": [SUPPORT]})
    assert denial_of(
        [parent], operation="payments.transfer", selected={"account": "a-1"}
    ).code == DenialCode.SCOPE_VIOLATION
    widening_of(parent, operations=["payments.transfer"], scope=parse_scope({"account": ["a-1"]}))


@pytest.mark.parametrize(
    ("parent_expires_at", "child_expires_at"),
    [
        (at(60), at(60)),
        (at(60), at(1)),
        (None, None),
        (None, at(600)),
    ],
)
def test_expiry_may_narrow(
    parent_expires_at: datetime | None, child_expires_at: datetime | None
) -> None:
    parent = owner_grant(expires_at=parent_expires_at)
    assert delegate_to_approver(parent, expires_at=child_expires_at).expires_at == (
        child_expires_at
    )


@pytest.mark.parametrize("child_expires_at", [at(61), None])
def test_second_expiry_past_the_parents_widens(child_expires_at: datetime | None) -> None:
    details = widening_of(owner_grant(), expires_at=child_expires_at)
    assert details == {
        "expires_at": {
            "requested": None if child_expires_at is None else child_expires_at.isoformat(),
            "parent": at(60).isoformat(),
        }
    }


def test_every_widening_is_reported_at_once() -> None:
    details = widening_of(
        owner_grant(),
        operations=["payments.transfer"],
        scope=parse_scope({"mailbox": "*"}),
        expires_at=None,
    )
    assert details == {
        "operations": ["payments.transfer"],
        "scope": {"mailbox": "*"},
        "expires_at": {"requested": None, "parent": at(60).isoformat()},
    }


@pytest.mark.parametrize("revoked_at", [at(-1), at(1)])
def test_revoked_parent_cannot_delegate(revoked_at: datetime) -> None:
    with pytest.raises(Denial) as caught:
        delegate_to_approver(owner_grant(revoked_at=revoked_at))
    assert caught.value.code == DenialCode.AUTHORITY_REVOKED
    assert caught.value.details == {"grant": "grt_owner"}


@pytest.mark.parametrize(
    ("not_before", "expires_at"),
    [(at(-60), NOW), (at(-60), at(-1)), (at(1), at(60))],
)
def test_parent_outside_its_validity_cannot_delegate(
    not_before: datetime, expires_at: datetime
) -> None:
    with pytest.raises(Denial) as caught:
        delegate_to_approver(owner_grant(not_before=not_before, expires_at=expires_at))
    assert caught.value.code == DenialCode.AUTHORITY_EXPIRED


def test_revoked_parent_is_refused_before_widening_is_considered() -> None:
    with pytest.raises(Denial) as caught:
        delegate_to_approver(owner_grant(revoked_at=at(-1)), operations=["*"])
    assert caught.value.code == DenialCode.AUTHORITY_REVOKED


def test_parent_expiring_in_the_delegation_window_can_still_delegate(clock: FixedClock) -> None:
    parent = owner_grant(expires_at=at(1))
    child = delegate_to_approver(parent, expires_at=at(1), now=clock.now)
    assert child.expires_at == at(1)
    clock.advance(minutes=1)
    with pytest.raises(Denial) as caught:
        delegate_to_approver(parent, expires_at=at(1), now=clock.now)
    assert caught.value.code == DenialCode.AUTHORITY_EXPIRED


@pytest.mark.parametrize("expires_at", [NOW, at(-1)])
def test_child_expiring_before_it_starts_is_refused(expires_at: datetime) -> None:
    with pytest.raises(ValueError, match="expires_at must be after now"):
        delegate_to_approver(owner_grant(), expires_at=expires_at)


def test_child_needs_an_operation() -> None:
    with pytest.raises(ValueError, match="at least one operation"):
        delegate_to_approver(owner_grant(), operations=[])


def test_operations_may_not_be_a_bare_string() -> None:
    with pytest.raises(TypeError, match="not a string"):
        delegate_to_approver(owner_grant(), operations="email.send")


@pytest.mark.parametrize("name", ["expires_at", "now"])
def test_delegate_refuses_naive_datetimes(name: str) -> None:
    naive = datetime(2030, 1, 1, 12, 30)
    with pytest.raises(ValueError, match="timezone-aware"):
        delegate_to_approver(owner_grant(), **{name: naive})


def test_chain_of_delegation_keeps_narrowing(clock: FixedClock) -> None:
    root = owner_grant(operations=["*"], scope={"mailbox": "*", "customer": "*"})
    child = delegate_to_approver(
        root,
        operations=["email.send", "crm.lookup"],
        scope=parse_scope({"mailbox": [SUPPORT, SALES], "customer": "*"}),
        now=clock.now,
    )
    grandchild = delegate(
        child,
        id="grt_outsider",
        issuer="approver",
        subject="outsider",
        operations=["email.send"],
        scope=parse_scope({"mailbox": [SALES]}),
        expires_at=at(20),
        now=clock.advance(minutes=5),
    )
    assert grandchild.parent_id == child.id
    assert grandchild.not_before == at(5)
    assert is_narrower_or_equal(grandchild, child)
    assert is_narrower_or_equal(grandchild, root)
    with pytest.raises(Denial) as caught:
        delegate(
            grandchild, id="grt_4", issuer="outsider", subject="owner",
            operations=["crm.lookup"], scope={}, expires_at=at(10), now=clock.now,
        )
    assert caught.value.code == DenialCode.DELEGATION_WIDENS


# is_narrower_or_equal ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("child", "parent", "narrower"),
    [
        (make_grant(), make_grant(), True),
        (make_grant(not_before=at(1)), make_grant(not_before=at(0)), True),
        (make_grant(not_before=at(-1)), make_grant(not_before=at(0)), False),
        (make_grant(not_before=None), make_grant(not_before=at(0)), False),
        (make_grant(not_before=at(-1)), make_grant(not_before=None), True),
        (make_grant(revoked_at=at(0)), make_grant(revoked_at=None), True),
        (make_grant(revoked_at=at(5)), make_grant(revoked_at=at(0)), True),
        (make_grant(revoked_at=None), make_grant(revoked_at=at(0)), False),
        (make_grant(subject="outsider", issuer="x"), make_grant(), True),
        (replace(make_grant(), scope={"mailbox": frozenset()}), make_grant(scope={}), True),
        (replace(make_grant(), scope={"account": frozenset()}), make_grant(scope={}), True),
        (make_grant(scope={"account": ["a-1"]}), make_grant(scope={}), False),
    ],
)
def test_is_narrower_or_equal(child: Grant, parent: Grant, narrower: bool) -> None:
    assert is_narrower_or_equal(child, parent) is narrower


# Properties -------------------------------------------------------------------------------------
#
# Grants are drawn from small alphabets and checked against the meaning of authority: a probe is
# an (operation, selected, now) that `authorize` accepts or refuses. Liveness only changes at a
# grant's bounds, so probing just before the earliest bound and at every bound covers all times.

OPERATIONS = ("email.send", "payments.transfer", "crm.lookup")
KEYS = ("mailbox", "account")
VALUES = ("a", "b", "c")
# Probes also use an operation and a value no grant names, so that a "*" is seen to widen.
PROBE_OPERATIONS = (*OPERATIONS, "other.op")
PROBE_TOOLS = frozenset(PROBE_OPERATIONS)
PROBE_SELECTIONS: tuple[dict[str, str], ...] = tuple(
    {key: value for key, value in zip(KEYS, choice, strict=True) if value is not None}
    for choice in itertools.product((None, *VALUES, "d"), repeat=len(KEYS))
)

operation_sets = st.frozensets(st.sampled_from((*OPERATIONS, ANY)), min_size=1)
scope_values: st.SearchStrategy[Any] = st.just(ANY) | st.frozensets(st.sampled_from(VALUES))
scopes = st.dictionaries(st.sampled_from(KEYS), scope_values)


def minutes(low: int, high: int) -> st.SearchStrategy[datetime]:
    return st.integers(min_value=low, max_value=high).map(lambda tens: at(tens * 10))


times = minutes(-3, 3)
optional_times = st.none() | times


def sometimes(draw: st.DrawFn) -> bool:
    """True about one time in five; shrinks towards False."""
    return draw(st.integers(min_value=0, max_value=4)) == 3


@st.composite
def root_grants(draw: st.DrawFn, subject: str = "owner") -> Grant:
    """Grants mostly live at `times`: a dead parent only exercises the first refusals."""
    return Grant(
        id=f"grt_{subject}",
        issuer="admin",
        subject=subject,
        operations=draw(operation_sets),
        scope=draw(scopes),
        not_before=draw(st.none() | minutes(-6, 1)),
        expires_at=draw(st.none() | minutes(-1, 6)),
        revoked_at=draw(times) if sometimes(draw) else None,
        parent_id=None,
    )


@dataclass
class ChildRequest:
    operations: frozenset[str]
    scope: dict[str, Any]
    expires_at: datetime | None


@st.composite
def child_requests(draw: st.DrawFn, parent: Grant) -> ChildRequest:
    """Half the time a random request, else an attempt to narrow `parent` that sometimes slips."""
    if draw(st.booleans()):
        return ChildRequest(draw(operation_sets), draw(scopes), draw(optional_times))
    operations = (
        draw(operation_sets)
        if ANY in parent.operations
        else draw(st.frozensets(st.sampled_from(sorted(parent.operations)), min_size=1))
    )
    if sometimes(draw):
        operations |= draw(operation_sets)
    scope: dict[str, Any] = {}
    for key, value in parent.scope.items():
        if sometimes(draw):
            continue
        if value == ANY or sometimes(draw):
            scope[key] = draw(scope_values)
        elif value:
            scope[key] = draw(st.frozensets(st.sampled_from(sorted(value))))
        else:
            scope[key] = value
    if sometimes(draw):
        scope[draw(st.sampled_from(KEYS))] = draw(scope_values)
    expires_at = parent.expires_at
    if expires_at is None or sometimes(draw):
        expires_at = draw(optional_times)
    return ChildRequest(operations, scope, expires_at)


@st.composite
def grant_pairs(draw: st.DrawFn) -> tuple[Grant, Grant]:
    """(child, parent): unrelated, or a near-copy of the parent that sometimes slips."""
    parent = draw(root_grants())
    if draw(st.booleans()):
        return draw(root_grants(subject="approver")), parent
    request = draw(child_requests(parent))
    not_before = draw(optional_times) if sometimes(draw) else parent.not_before
    revoked_at = draw(optional_times) if sometimes(draw) else parent.revoked_at
    child = Grant(
        id="grt_approver", issuer="owner", subject="approver", operations=request.operations,
        scope=request.scope, not_before=not_before, expires_at=request.expires_at,
        revoked_at=revoked_at, parent_id=parent.id,
    )
    return child, parent


def is_authorized(grant: Grant, operation: str, selected: Mapping[str, str], now: datetime) -> bool:
    try:
        authorize(
            grants=[grant],
            subject=grant.subject,
            operation=operation,
            effects=frozenset({"read"}),
            selected=selected,
            tool_set=PROBE_TOOLS,
            policy=Policy.permissive(),
            now=now,
        )
    except Denial:
        return False
    return True


def probe_times(*grants: Grant) -> list[datetime]:
    bounds = {
        bound
        for grant in grants
        for bound in (grant.not_before, grant.expires_at)
        if bound is not None
    }
    return [min(bounds, default=NOW) - timedelta(minutes=1), *sorted(bounds)]


def widening_witness(child: Grant, parent: Grant) -> tuple[datetime, str, dict[str, str]] | None:
    """A probe the child authorizes and the parent does not, at any time; or None."""
    probes = itertools.product(probe_times(child, parent), PROBE_OPERATIONS, PROBE_SELECTIONS)
    for now, operation, selected in probes:
        if not is_authorized(child, operation, selected, now):
            continue
        if not is_authorized(parent, operation, selected, now):
            return now, operation, selected
    return None


def can_authorize_something(grant: Grant) -> bool:
    if grant.revoked_at is not None:
        return False
    if not grant.operations:
        return False
    if grant.not_before is None or grant.expires_at is None:
        return True
    return grant.not_before < grant.expires_at


def attempt(parent: Grant, request: ChildRequest, now: datetime, index: int = 1) -> Grant:
    return delegate(
        parent,
        id=f"grt_{index}",
        issuer=parent.subject,
        subject=f"approver{index}",
        operations=request.operations,
        scope=request.scope,
        expires_at=request.expires_at,
        now=now,
    )


def candidate(parent: Grant, request: ChildRequest, now: datetime) -> Grant:
    """The child `delegate` would build, built without its checks."""
    return Grant(
        id="grt_1", issuer=parent.subject, subject="approver1", operations=request.operations,
        scope=request.scope, not_before=now, expires_at=request.expires_at, revoked_at=None,
        parent_id=parent.id,
    )


@settings(max_examples=300, deadline=None)
@given(data=st.data(), parent=root_grants(), now=times)
def test_delegation_narrows_or_is_refused(
    data: st.DataObject, parent: Grant, now: datetime
) -> None:
    """A delegated child authorizes no (operation, selected, now) its parent refuses; a refusal
    names the parent's state or a real widening."""
    request = data.draw(child_requests(parent))
    try:
        child = attempt(parent, request, now)
    except Denial as denial:
        if parent.revoked_at is not None:
            assert denial.code == DenialCode.AUTHORITY_REVOKED
        elif not grant_is_live(parent, now):
            assert denial.code == DenialCode.AUTHORITY_EXPIRED
        else:
            assert denial.code == DenialCode.DELEGATION_WIDENS
            refused = candidate(parent, request, now)
            assert not is_narrower_or_equal(refused, parent)
            if can_authorize_something(refused):
                assert widening_witness(refused, parent) is not None
        return
    except ValueError:
        assert grant_is_live(parent, now)
        assert request.expires_at is not None
        assert request.expires_at <= now
        assert is_narrower_or_equal(candidate(parent, request, now), parent)
        return
    assert grant_is_live(parent, now)
    assert is_narrower_or_equal(child, parent)
    assert widening_witness(child, parent) is None
    assert child.parent_id == parent.id
    assert child.not_before == now
    assert child.revoked_at is None


@settings(max_examples=300, deadline=None)
@given(pair=grant_pairs())
def test_narrower_or_equal_means_authorizing_nothing_more(pair: tuple[Grant, Grant]) -> None:
    """`is_narrower_or_equal` is exact for a child that can authorize anything at all."""
    child, parent = pair
    witness = widening_witness(child, parent)
    if is_narrower_or_equal(child, parent):
        assert witness is None
    elif can_authorize_something(child):
        assert witness is not None


@settings(max_examples=100, deadline=None)
@given(data=st.data(), root=root_grants(), start=times, depth=st.integers(1, 4))
def test_chains_of_delegation_never_widen(
    data: st.DataObject, root: Grant, start: datetime, depth: int
) -> None:
    chain = [root]
    now = start
    for index in range(1, depth + 1):
        now += timedelta(minutes=data.draw(st.integers(0, 15)))
        try:
            chain.append(attempt(chain[-1], data.draw(child_requests(chain[-1])), now, index))
        except (Denial, ValueError):
            break
    for ancestor, descendant in itertools.combinations(chain, 2):
        assert is_narrower_or_equal(descendant, ancestor)
    for descendant in chain[1:]:
        assert widening_witness(descendant, root) is None


@given(grant=root_grants())
def test_every_grant_is_narrower_or_equal_to_itself(grant: Grant) -> None:
    assert is_narrower_or_equal(grant, grant)


# with_ancestry: a delegated grant never outlives the grants it came from ---------------------


def chain(**root: Any) -> tuple[Grant, dict[str, Grant]]:
    """root -> middle -> leaf (the leaf held by `owner`); `root` overrides the root's fields."""
    top = make_grant(id="grt_root", subject="admin", **root)
    middle = make_grant(id="grt_mid", subject="lead", parent_id=top.id)
    leaf = make_grant(id="grt_leaf", parent_id=middle.id)
    return leaf, {g.id: g for g in (top, middle, leaf)}


def test_a_grant_whose_ancestor_is_revoked_is_revoked() -> None:
    leaf, by_id = chain(revoked_at=at(-5))
    effective = with_ancestry(leaf, by_id)
    assert effective.revoked_at == at(-5)
    assert denial_of([effective]).code == DenialCode.AUTHORITY_REVOKED


def test_a_grant_whose_ancestor_expired_is_expired() -> None:
    leaf, by_id = chain(expires_at=at(-1))
    assert denial_of([with_ancestry(leaf, by_id)]).code == DenialCode.AUTHORITY_EXPIRED


def test_a_grant_is_valid_only_inside_every_ancestors_interval() -> None:
    leaf, by_id = chain(not_before=at(10), expires_at=at(60))
    effective = with_ancestry(leaf, by_id)
    assert (effective.not_before, effective.expires_at) == (at(10), at(60))
    assert check([effective], now=at(30)) == effective
    assert denial_of([effective], now=at(5)).code == DenialCode.AUTHORITY_EXPIRED


def test_a_live_chain_changes_nothing() -> None:
    leaf, by_id = chain()
    assert with_ancestry(leaf, by_id) == leaf


@pytest.mark.parametrize("broken", ["missing", "cycle"])
def test_a_broken_chain_is_refused_never_live(broken: str) -> None:
    leaf, by_id = chain()
    if broken == "missing":
        del by_id["grt_root"]
    else:
        by_id["grt_root"] = make_grant(id="grt_root", subject="admin", parent_id="grt_leaf")
    with pytest.raises(ValueError, match="missing or cyclic"):
        with_ancestry(leaf, by_id)


# budgets (docs/design.md#delegation) ---------------------------------------------------


def test_a_child_of_an_unbudgeted_grant_may_carry_any_budget() -> None:
    child = delegate_to_approver(owner_grant(), budget=5)
    assert child.budget == 5
    assert is_narrower_or_equal(child, owner_grant())


@pytest.mark.parametrize(("requested", "widens"), [(None, True), (4, True), (3, False),
                                                   (0, False)])
def test_a_child_of_a_budgeted_grant_has_a_budget_no_larger(
    requested: int | None, widens: bool,
) -> None:
    parent = replace(owner_grant(), budget=3)
    if widens:
        assert widening_of(parent, budget=requested) == {
            "budget": {"requested": requested, "parent": 3}}
    else:
        assert delegate_to_approver(parent, budget=requested).budget == requested


@pytest.mark.parametrize("budget", [-1, True, 1.5, "3"])
def test_a_budget_is_a_non_negative_integer(budget: Any) -> None:
    with pytest.raises(ValueError, match="budget"):
        replace(owner_grant(), budget=budget)


def test_a_budget_survives_the_ancestry() -> None:
    root = owner_grant()
    child = delegate_to_approver(root, budget=2)
    assert with_ancestry(child, {root.id: root}).budget == 2
