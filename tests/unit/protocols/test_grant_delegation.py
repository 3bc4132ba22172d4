"""Delegating authority: `delegate` narrows, a child never outlives its ancestry, budgets
narrow too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from protocols.denials import Denial, DenialCode
from protocols.grants import (
    Grant,
    delegate,
    is_narrower_or_equal,
    parse_scope,
    with_ancestry,
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
