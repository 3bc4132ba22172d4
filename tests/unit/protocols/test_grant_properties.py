"""Properties of authority over grants drawn from small alphabets (hypothesis)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.denials import Denial, DenialCode
from protocols.grants import (
    ANY,
    Grant,
    Policy,
    authorize,
    delegate,
    grant_is_live,
    is_narrower_or_equal,
)
from tests.unit.protocols.grant_helpers import (
    NOW,
    at,
)

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
