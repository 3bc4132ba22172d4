"""Authority grants, their scope algebra, authorization and delegation (docs/design.md#grants,
docs/rest-api.md#calls).

A grant gives a subject some operations over a resource scope for a validity interval until it is
revoked. A scope maps an authority key (`mailbox`, `account`, `customer`) to the values allowed
for it, or to `"*"` for any value. A key missing from a scope allows nothing for that key: the
algebra is default-deny, so a grant covers an action only if it names every key the action
selects, and a delegated grant that drops a key narrows while one that adds a key widens.

Effective authority is the intersection of the contract's requirement, the subject's grants, the
agent's tool set and deployment policy (`authorize`). Delegation may only narrow operations,
scope and validity (`delegate`); `is_narrower_or_equal` is the one definition of "narrower".

Pure: no clock, no I/O. `now` is always an argument and every datetime must be timezone-aware.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias

from protocols.approval_rules import ApprovalRule
from protocols.denials import Denial, DenialCode

ANY: Final = "*"
"""In a scope: any value for that key. In a grant's operations: every operation."""

NOTHING: Final[frozenset[str]] = frozenset()
"""What a scope allows for a key it does not name: no value (default deny)."""

ScopeValue: TypeAlias = Literal["*"] | frozenset[str]
Scope: TypeAlias = Mapping[str, ScopeValue]

USUAL_EFFECTS: Final = frozenset({"read", "external_write", "financial_write", "human"})


def parse_scope(raw: Mapping[str, Any]) -> Scope:
    """Parse the JSON form of a scope (docs/rest-api.md#calls), refusing bad shapes with
    `ValueError`.

    `{"mailbox": ["a@x"]}` allows exactly the listed values; `{"customer": "*"}` and
    `{"customer": ["*"]}` allow any value. A bare string other than `"*"`, an empty list, a list
    mixing `"*"` with values, and non-string or empty keys and values are refused.
    """
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"a scope must be a JSON object, not {type(raw).__name__}")
    parsed: dict[str, ScopeValue] = {}
    for key, value in raw.items():
        _check_key(key)
        parsed[key] = _parse_scope_value(key, value)
    return MappingProxyType(parsed)


def _check_key(key: object) -> None:
    if not isinstance(key, str) or not key:
        raise ValueError(f"scope keys must be non-empty strings, got {key!r}")


def _parse_scope_value(key: str, value: object) -> ScopeValue:
    if value == ANY:
        return ANY
    if isinstance(value, str) or not isinstance(value, list | tuple | set | frozenset):
        raise ValueError(
            f"scope[{key!r}] must be '*' or a list of strings, got {value!r}")
    if not value:
        raise ValueError(f"scope[{key!r}] is an empty list, which allows nothing")
    _check_items(key, value)  # before hashing: a JSON object inside the list is unhashable
    values = frozenset(value)
    if values == {ANY}:
        return ANY
    if ANY in values:
        raise ValueError(f"scope[{key!r}] mixes '*' with listed values; use '*' alone")
    return values


def _check_items(key: str, items: Iterable[object]) -> None:
    for item in items:
        if not isinstance(item, str) or not item:
            raise ValueError(f"scope[{key!r}] values must be non-empty strings, got {item!r}")


def _check_values(key: str, values: frozenset[object]) -> None:
    _check_items(key, values)
    if ANY in values:
        raise ValueError(f"scope[{key!r}] mixes '*' with listed values; use '*' alone")


def scope_as_json(scope: Scope) -> dict[str, str | list[str]]:
    """The JSON form of a scope, values sorted: the inverse of `parse_scope`."""
    return {key: _value_as_json(value) for key, value in sorted(scope.items())}


def _value_as_json(value: ScopeValue) -> str | list[str]:
    if isinstance(value, frozenset):
        return sorted(value)
    return ANY


def _require_aware(value: datetime | None, name: str) -> None:
    if value is None:
        return
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got {value!r}")


@dataclass(frozen=True)
class Grant:
    """Authority of `subject` over `operations` within `scope`, from `not_before` until
    `expires_at` (exclusive) unless revoked. `operations` holds qualified operation names, or
    `"*"` for every operation. `None` bounds are open. `parent_id` names the grant this one was
    delegated from. Any `revoked_at` marks the grant revoked, whatever the clock says.

    `budget` (docs/design.md#delegation): the budget units that may ever be spent under
    this grant, carved out of its delegator's budget when it was issued; `None` is unbudgeted
    (a root grant, or a child of one delegated without a budget). The shell keeps the counter;
    here it only takes part in narrowing: a child of a budgeted grant has a budget no larger.
    """

    id: str
    issuer: str
    subject: str
    operations: frozenset[str]
    scope: Scope = field(hash=False)  # a mapping is unhashable; `id` identifies a grant
    not_before: datetime | None
    expires_at: datetime | None
    revoked_at: datetime | None
    parent_id: str | None
    budget: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.operations, frozenset):
            raise TypeError("Grant.operations must be a frozenset of operation names")
        names: frozenset[object] = self.operations  # checked: callers may not be typed
        for operation in names:
            if not isinstance(operation, str) or not operation:
                raise ValueError(f"operation names must be non-empty strings: {operation!r}")
        for key, value in self.scope.items():
            _check_key(key)
            if value != ANY and not isinstance(value, frozenset):
                raise ValueError(f"scope[{key!r}] must be '*' or a frozenset, got {value!r}")
            if isinstance(value, frozenset):
                _check_values(key, value)
        # Copy, so that a caller's dict mutated later cannot change a frozen grant.
        object.__setattr__(self, "scope", MappingProxyType(dict(self.scope)))
        _require_aware(self.not_before, "not_before")
        _require_aware(self.expires_at, "expires_at")
        _require_aware(self.revoked_at, "revoked_at")
        budget: object = self.budget  # checked: callers may not be typed
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)
                                   or budget < 0):
            raise ValueError(f"a budget is a non-negative integer or None, got {budget!r}")


@dataclass(frozen=True)
class Policy:
    """Deployment policy: the effects allowed here, operations switched off entirely, and the
    approval rules (`APPROVAL_RULES`: quorums and caps by argument)."""

    allowed_effects: frozenset[str]
    denied_operations: frozenset[str] = frozenset()
    approval_rules: tuple[ApprovalRule, ...] = ()

    @classmethod
    def permissive(cls) -> Policy:
        """Allow the usual effects (read, external_write, financial_write, human)."""
        return cls(allowed_effects=USUAL_EFFECTS)


def grant_is_live(grant: Grant, now: datetime) -> bool:
    """True when `grant` is not revoked and `not_before <= now < expires_at`."""
    _require_aware(now, "now")
    if grant.revoked_at is not None:
        return False
    if grant.not_before is not None and now < grant.not_before:
        return False
    return grant.expires_at is None or now < grant.expires_at


def _covers_operation(grant: Grant, operation: str) -> bool:
    return ANY in grant.operations or operation in grant.operations


def _allows(allowed: ScopeValue, value: str) -> bool:
    if isinstance(allowed, frozenset):
        return value in allowed
    return True


def _uncovered(scope: Scope, selected: Mapping[str, str]) -> tuple[str, str] | None:
    """The first (key, value) of `selected`, by key, that `scope` does not allow."""
    for key, value in sorted(selected.items()):
        if not _allows(scope.get(key, NOTHING), value):
            return key, value
    return None


def authorize(
    *,
    grants: Iterable[Grant],
    subject: str,
    operation: str,
    effects: frozenset[str],
    selected: Mapping[str, str],
    tool_set: frozenset[str],
    policy: Policy,
    now: datetime,
) -> Grant:
    """Return the grant under which `subject` may run `operation` now, or raise a `Denial`.

    `selected` maps each authority key the contract requires to the concrete value the arguments
    select (empty: the contract requires no resource scope). Decided in this order, each denial
    raised in exactly one place (docs/design.md#dispatcher step 3, docs/design.md#denials):

    1. `operation` not in `tool_set` -> `tool_not_permitted`.
    2. `operation` in `policy.denied_operations` -> `effect_not_permitted` (details `operation`,
       `effects`); `effects` not a subset of `policy.allowed_effects` -> `effect_not_permitted`
       (details `effects`: the ones not allowed).
    3. Among the subject's grants whose operations cover `operation`, the first (in `grants`
       order) that is live (`grant_is_live`) and whose scope allows every selected key/value is
       returned. A key missing from a grant's scope does not cover it.
    4. Otherwise the denial that says what happened (docs/design.md#denials): the values are covered
      only by
       a revoked grant -> `authority_revoked`; only by grants outside their validity interval
       (expired or not yet valid) -> `authority_expired`; by no grant, live or not ->
       `scope_violation` (details `key`, `value` of the first failing grant's first uncovered
       key); no grant for the operation at all -> `authority_missing`.

    A delegated grant is revoked or expired when any grant it was delegated from is: pass each
    grant through `with_ancestry` first.
    """
    _require_aware(now, "now")
    if operation not in tool_set:
        raise Denial(DenialCode.TOOL_NOT_PERMITTED, operation=operation)
    if operation in policy.denied_operations:
        raise Denial(
            DenialCode.EFFECT_NOT_PERMITTED,
            "Deployment policy does not allow this operation here.",
            operation=operation,
            effects=sorted(effects),
        )
    forbidden_effects = effects - policy.allowed_effects
    if forbidden_effects:
        raise Denial(DenialCode.EFFECT_NOT_PERMITTED, effects=sorted(forbidden_effects))

    candidates = [
        grant
        for grant in grants
        if grant.subject == subject and _covers_operation(grant, operation)
    ]
    covering_dead: list[Grant] = []  # cover the values, but are not live now
    scope_failure: tuple[str, str] | None = None
    for grant in candidates:
        uncovered = _uncovered(grant.scope, selected)
        if uncovered is None:
            if grant_is_live(grant, now):
                return grant
            covering_dead.append(grant)
        elif scope_failure is None:
            scope_failure = uncovered

    if any(grant.revoked_at is not None for grant in covering_dead):
        raise Denial(DenialCode.AUTHORITY_REVOKED, operation=operation)
    if covering_dead:
        # Each covering grant is unrevoked and not live: expired or not yet valid.
        raise Denial(DenialCode.AUTHORITY_EXPIRED, operation=operation)
    if scope_failure is not None:
        key, value = scope_failure
        raise Denial(DenialCode.SCOPE_VIOLATION, key=key, value=value)
    raise Denial(DenialCode.AUTHORITY_MISSING, operation=operation)


def with_ancestry(grant: Grant, grants_by_id: Mapping[str, Grant]) -> Grant:
    """`grant` as authority sees it: revoked when it or any grant it was delegated from is,
    valid only while every one of them is (docs/design.md#grants: delegation never outlives its
    parent).

    `grants_by_id` must hold every ancestor; a missing one or a cycle is a store inconsistency
    (`ValueError`), never silently a live grant.
    """
    revoked_at, not_before, expires_at = grant.revoked_at, grant.not_before, grant.expires_at
    seen = {grant.id}
    parent_id = grant.parent_id
    while parent_id is not None:
        parent = grants_by_id.get(parent_id)
        if parent is None or parent_id in seen:
            raise ValueError(f"grant {grant.id}: ancestor {parent_id} missing or cyclic")
        seen.add(parent_id)
        revoked_at = _earliest(revoked_at, parent.revoked_at)
        expires_at = _earliest(expires_at, parent.expires_at)
        if parent.not_before is not None and (not_before is None or parent.not_before > not_before):
            not_before = parent.not_before
        parent_id = parent.parent_id
    return replace(grant, revoked_at=revoked_at, not_before=not_before, expires_at=expires_at)


def _earliest(first: datetime | None, second: datetime | None) -> datetime | None:
    if first is None:
        return second
    if second is None:
        return first
    return min(first, second)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _widened_values(child: ScopeValue, parent: ScopeValue) -> str | list[str] | None:
    """What `child` allows beyond `parent` for one key (`None`: nothing beyond)."""
    if not isinstance(parent, frozenset):
        return None
    if not isinstance(child, frozenset):
        return ANY
    extra = child - parent
    return sorted(extra) if extra else None


def _widened_scope(child: Scope, parent: Scope) -> dict[str, str | list[str]]:
    widened: dict[str, str | list[str]] = {}
    for key, value in sorted(child.items()):
        extra = _widened_values(value, parent.get(key, NOTHING))
        if extra is not None:
            widened[key] = extra
    return widened


def _starts_earlier(child: datetime | None, parent: datetime | None) -> bool:
    """Whether a `not_before` reaches before the parent's (`None`: since ever)."""
    if parent is None:
        return False
    if child is None:
        return True
    return child < parent


def _ends_later(child: datetime | None, parent: datetime | None) -> bool:
    """Whether an `expires_at` reaches past the parent's (`None`: never expires)."""
    if parent is None:
        return False
    if child is None:
        return True
    return child > parent


def widenings(child: Grant, parent: Grant) -> dict[str, Any]:
    """Everything in which `child` exceeds `parent`, as JSON-ready denial details (empty: the
    child is narrower or equal). Keys: `operations`, `scope`, `not_before`, `expires_at`,
    `revoked_at`, `budget` (a child of a budgeted parent without a budget, or with a larger one:
    it could spend what its parent may not)."""
    widened: dict[str, Any] = {}
    if ANY not in parent.operations and not child.operations <= parent.operations:
        widened["operations"] = sorted(child.operations - parent.operations)
    scope = _widened_scope(child.scope, parent.scope)
    if scope:
        widened["scope"] = scope
    if _starts_earlier(child.not_before, parent.not_before):
        widened["not_before"] = {
            "requested": _iso(child.not_before), "parent": _iso(parent.not_before)}
    if _ends_later(child.expires_at, parent.expires_at):
        widened["expires_at"] = {
            "requested": _iso(child.expires_at), "parent": _iso(parent.expires_at)}
    if parent.revoked_at is not None and child.revoked_at is None:
        widened["revoked_at"] = {"requested": None, "parent": _iso(parent.revoked_at)}
    if parent.budget is not None and (child.budget is None or child.budget > parent.budget):
        widened["budget"] = {"requested": child.budget, "parent": parent.budget}
    return widened


def is_narrower_or_equal(child: Grant, parent: Grant) -> bool:
    """True when every action `child` authorizes at any `now`, `parent` authorizes too.

    Operations: a subset, `"*"` only under `"*"`. Scope: every key of the child is in the parent
    with a subset of its values (a parent `"*"` allows anything; a child `"*"` under a finite
    parent widens); dropping a key narrows, adding one the parent lacks widens. Validity: no
    earlier `not_before`, no later `expires_at` (unbounded only under unbounded), and revoked if
    the parent is. Budget: none is wider than any, and a larger one is wider (a parent without
    a budget bounds nothing). Subjects and issuers are not compared.
    """
    return not widenings(child, parent)


def delegate(
    parent: Grant,
    *,
    id: str,
    issuer: str,
    subject: str,
    operations: Iterable[str],
    scope: Scope,
    expires_at: datetime | None,
    now: datetime,
    budget: int | None = None,
) -> Grant:
    """Derive a child of `parent` that may only narrow it (docs/design.md#grants,
    docs/rest-api.md#calls, docs/design.md#evidence).

    Refusals, in order: a revoked parent -> `authority_revoked`; a parent not live at `now`
    (expired or not yet valid) -> `authority_expired`; naive datetimes, an empty or string
    `operations`, a malformed `scope`, a negative `budget` -> `ValueError`/`TypeError`; any
    widening (see `widenings`) -> `delegation_widens` with details naming every widened part
    (`operations`, `scope`, `expires_at`, `budget`); an `expires_at` not after `now` ->
    `ValueError`. A `budget` is a bound the shell must also carve out of the parent's counter:
    narrowing alone does not stop two children from each spending the parent's whole budget.

    The child is valid from `now` (the parent is live, so `now >= parent.not_before`): a
    delegation never reaches back before the moment it was made. Revoking the parent does not
    touch the child here; the shell must revoke descendants with it, or the child stops being
    narrower than its parent.
    """
    _require_aware(now, "now")
    if parent.revoked_at is not None:
        raise Denial(DenialCode.AUTHORITY_REVOKED, grant=parent.id)
    if not grant_is_live(parent, now):
        raise Denial(DenialCode.AUTHORITY_EXPIRED, grant=parent.id)
    if isinstance(operations, str):
        raise TypeError("operations must be an iterable of operation names, not a string")
    child = Grant(
        id=id,
        issuer=issuer,
        subject=subject,
        operations=frozenset(operations),
        scope=scope,
        not_before=now,
        expires_at=expires_at,
        revoked_at=None,
        parent_id=parent.id,
        budget=budget,
    )
    if not child.operations:
        raise ValueError("a delegated grant needs at least one operation")
    widened = widenings(child, parent)
    if widened:
        raise Denial(DenialCode.DELEGATION_WIDENS, **widened)
    if child.expires_at is not None and child.expires_at <= now:
        raise ValueError("expires_at must be after now")
    return child
