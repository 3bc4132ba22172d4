"""Authority (docs/design.md#grants, #dispatcher, #denials, docs/rest-api.md#calls): roles, grants
and their scope, in the shell.

The decisions are pure (`protocols.grants`); this module loads what they decide on and writes
what they allow: grants read with their ancestry (a grant is revoked or expired when any grant
it was delegated from is), share-locked inside a claim's or decision's transaction so that a
revocation always wins; root grants issued, delegated (only narrower) and revoked with the
whole tree and the unclaimed permits that rest on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from django.db import connection, transaction

from dispatch.failpoints import failpoint
from dispatch.models import Delegation, Grant, Principal
from dispatch.runtime import Runtime, get_runtime
from dispatch.services.access import access_grant_by_id
from dispatch.services.audit import audit_record
from dispatch.services.permits import permits_revoke_resting_on
from dispatch.store import grants
from protocols import grants as core
from protocols.contracts import OperationContract
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject, JSONValue
from protocols.roles import Role, role_allows


def has_role(principal: Principal, role: str) -> bool:
    """Whether `principal` is a human holding `role`; an admin holds every right of an
    operator (docs/design.md#principals). Agents hold no role."""
    return principal.kind == Principal.Kind.HUMAN and role_allows(principal.role, role)


def require_role(principal: Principal, role: str) -> None:
    """`role_required` unless `principal` is a human holding `role` (or admin)."""
    if not has_role(principal, role):
        raise Denial(DenialCode.ROLE_REQUIRED, role=role)


def as_core(grant: Grant) -> core.Grant:
    return core.Grant(
        id=grant.id,
        issuer=grant.issuer,
        subject=grant.subject_id,
        operations=frozenset(grant.operations),
        scope=core.parse_scope(grant.scope),
        not_before=grant.not_before,
        expires_at=grant.expires_at,
        revoked_at=grant.revoked_at,
        parent_id=grant.parent_id,
        budget=grant.budget,
    )


def _effective(rows: list[Grant], wanted: Callable[[Grant], bool]) -> list[core.Grant]:
    by_id = {row.id: as_core(row) for row in rows}
    return [core.with_ancestry(by_id[row.id], by_id) for row in rows if wanted(row)]


def grants_of(principal: Principal, *, lock: bool = False) -> list[core.Grant]:
    """The principal's grants as authority sees them: a grant is revoked or expired when any
    grant it was delegated from is (docs/design.md#denials). A delegated step's sub-agent holds its
    own step's grant and no other, whoever named it as subject (docs/design.md#delegation). `lock`:
    see `dispatch.store.grants.chain`."""
    rows = grants.chain(start="subject_id", value=principal.id, lock=lock)
    own = None
    if principal.subagent:
        own = Delegation.objects.filter(principal_id=principal.id).values_list(
            "grant_id", flat=True).first()
    return _effective(rows, lambda row: row.subject_id == principal.id
                      and (not principal.subagent or row.id == own))


def grant_effective(grant_id: str, *, lock: bool = False) -> core.Grant:
    """One grant with its ancestry, as `grants_of` sees it."""
    rows = grants.chain(start="id", value=grant_id, lock=lock)
    return _effective(rows, lambda row: row.id == grant_id)[0]


def grant_issue(
    *, issuer: str | Principal, subject: Principal, operations: Iterable[str],
    scope: JSONObject, now: datetime, expires_in: int | None = None,
    expires_at: datetime | None = None,
) -> Grant:
    """Issue a root grant: the host's authorization service only (docs/design.md#grants). `issuer`
    is a human admin of the subject's tenant (checked here), or the name the host's own commands
    issue under. A delegated step's sub-agent is no subject: `not_found`, as for a name that
    names nobody (its authority is its step's grant alone, docs/design.md#delegation). The grant
    ends `expires_in` seconds from `now`, or at `expires_at`, or never (at most one of them)."""
    if expires_in is not None and expires_at is not None:
        raise ValueError("a grant's end is given by expires_in or by expires_at, not both")
    if subject.subagent:
        raise Denial(DenialCode.NOT_FOUND, kind="principal", id=subject.name)
    if isinstance(issuer, Principal):
        require_role(issuer, Role.ADMIN)
        if issuer.tenant_id != subject.tenant_id:
            raise Denial(DenialCode.NOT_FOUND, kind="principal", id=subject.name)
        issuer = issuer.name
    operations = get_runtime().require_operations(operations)
    parsed = core.parse_scope(scope)
    with transaction.atomic():
        grant = Grant.objects.create(
            tenant_id=subject.tenant_id, issuer=issuer, subject=subject,
            operations=operations, scope=core.scope_as_json(parsed),
            not_before=now, expires_at=expires_at if expires_in is None else now + timedelta(
                seconds=expires_in),
        )
        audit_record(tenant_id=subject.tenant_id, kind="grant.issued", actor=issuer, at=now,
                     details={"grant_id": grant.id, "subject": subject.name,
                              "operations": grant.operations, "scope": grant.scope})
    return grant


def grant_revoke(*, actor: Principal, grant_id: object, now: datetime) -> Grant:
    """Revoke a grant of the actor's tenant and every grant delegated from it."""
    require_role(actor, Role.ADMIN)
    return grant_revoke_tree(grant=access_grant_by_id(actor, grant_id), actor_name=actor.name,
                             now=now)


def grant_revoke_tree(*, grant: Grant, actor_name: str, now: datetime) -> Grant:
    """Revoke `grant`, every grant delegated from it and every unclaimed permit minted under any
    of them, in one transaction, with one `grant.revoked` event.

    Revocation wins every race (docs/design.md#claim): the tree is locked for update in id order,
    the order in which claims, decisions and delegations share-lock the grants they rest on, so
    each of them either sees this revocation or commits before it. A delegation that slipped
    a child in while the tree was being read is found by reading the tree again once locked.
    """
    with transaction.atomic():
        tree: set[str] = set()
        while True:
            found = _tree_of(grant.id)
            if found <= tree:
                break
            tree |= found
            list(Grant.objects.select_for_update().filter(id__in=sorted(tree))
                 .order_by("id").values_list("id", flat=True))
        Grant.objects.filter(id__in=tree, revoked_at__isnull=True).update(revoked_at=now)
        permits = permits_revoke_resting_on(grant_ids=tree, actor=actor_name, now=now)
        audit_record(tenant_id=grant.tenant_id, kind="grant.revoked", actor=actor_name, at=now,
                     details={"grant_id": grant.id, "revoked": sorted(tree),
                              "permits_revoked": permits})
    grant.refresh_from_db()
    return grant


def _tree_of(root_id: str) -> set[str]:
    tree, frontier = {root_id}, [root_id]
    while frontier:
        frontier = list(Grant.objects.filter(parent_id__in=frontier).values_list("id", flat=True))
        tree.update(frontier)
    return tree


def grant_delegate(
    *, actor: Principal, grant_id: object, subject_name: object, operations: object,
    scope: object, expires_at: datetime | None, now: datetime,
) -> Grant:
    """A narrower child of the actor's own grant; `delegation_widens` otherwise. A delegated
    step's sub-agent is no subject (`not_found`, as a name that names nobody): only its step
    delegates to it (`grant_delegate_from_covering`)."""
    parent = access_grant_by_id(actor, grant_id)
    if parent.subject_id != actor.id:
        raise Denial(DenialCode.NOT_FOUND, kind="grant", id=grant_id)
    subject = Principal.objects.filter(name=subject_name, tenant_id=actor.tenant_id,
                                       subagent=False).first()
    if subject is None:
        raise Denial(DenialCode.NOT_FOUND, kind="principal", id=subject_name)
    if not isinstance(operations, list) or not all(isinstance(o, str) for o in operations):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/operations", "message": "must be a list of operation names"}])
    try:
        parsed = core.parse_scope(scope)  # type: ignore[arg-type]
    except (ValueError, TypeError, AttributeError) as exc:
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/scope", "message": str(exc)}]) from None

    def derive(lock: bool) -> core.Grant:
        # The parent as authority sees it: revoked or expired with any of its ancestors.
        try:
            return core.delegate(
                grant_effective(parent.id, lock=lock), id="pending", issuer=actor.name,
                subject=subject.id, operations=operations, scope=parsed,
                expires_at=expires_at, now=now,
            )
        except ValueError as exc:  # empty operations, an expiry in the past, a naive datetime
            raise Denial(DenialCode.SCHEMA_INVALID, errors=[
                {"pointer": "", "message": str(exc)}]) from None

    derive(lock=False)
    failpoint("delegation.before_transaction")
    with transaction.atomic():
        # Again, after any wait for the parent's lock: a revocation that committed meanwhile
        # refuses this delegation; one that comes later finds the child and revokes it too.
        child = derive(lock=True)
        grant = Grant.objects.create(
            tenant_id=actor.tenant_id, issuer=actor.name, subject=subject,
            operations=sorted(child.operations), scope=core.scope_as_json(child.scope),
            not_before=child.not_before, expires_at=child.expires_at, parent=parent,
        )
        audit_record(tenant_id=actor.tenant_id, kind="grant.delegated", actor=actor.name,
                     at=now, details={"grant_id": grant.id, "parent_id": parent.id,
                                      "subject": subject.name, "operations": grant.operations,
                                      "scope": grant.scope})
    return grant


def grant_delegate_from_covering(
    *, principal: Principal, subject: Principal, operations: list[str], scope: JSONObject,
    expires_at: datetime, budget: int, now: datetime, details: JSONObject,
) -> Grant:
    """A child of whichever of `principal`'s own grants covers it, only narrower
    (docs/design.md#delegation): the workflow runtime's delegation for a step, with
    `grants/{id}/delegate/` semantics (`protocols.grants.delegate`). Inside the caller's
    transaction: the principal's grants are share-locked where they are read, as in
    `grant_delegate`, so a revocation that committed first refuses this and a later one finds the
    child and revokes it too.

    Refusals: an operation outside the principal's own tool set -> `tool_not_permitted` (its
    effective authority never held it); no grant of it names any of the operations ->
    `authority_missing`;
    a live grant that names them but is narrower than the request -> `delegation_widens`
    (the details of the first such grant); only revoked or expired ones -> `authority_revoked`
    / `authority_expired`. A malformed scope -> `schema_invalid`.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("grant_delegate_from_covering runs inside the caller's transaction")
    try:
        parsed = core.parse_scope(scope)
    except (ValueError, TypeError) as exc:
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/scope", "message": str(exc)}]) from None
    wanted = set(operations)
    outside = sorted(wanted - set(principal.tools))
    if outside:
        raise Denial(DenialCode.TOOL_NOT_PERMITTED, operation=outside[0])
    candidates = [g for g in grants_of(principal, lock=True)
                  if core.ANY in g.operations or g.operations & wanted]
    if not candidates:
        raise Denial(DenialCode.AUTHORITY_MISSING, operation=sorted(wanted)[0])
    refusals: list[Denial] = []
    for parent in sorted(candidates, key=lambda g: not core.grant_is_live(g, now)):
        try:
            child = core.delegate(parent, id="pending", issuer=principal.name,
                                  subject=subject.id, operations=operations, scope=parsed,
                                  expires_at=expires_at, now=now, budget=budget)
        except Denial as denial:
            refusals.append(denial)
            continue
        grant = Grant.objects.create(
            tenant_id=principal.tenant_id, issuer=principal.name, subject=subject,
            operations=sorted(child.operations), scope=core.scope_as_json(child.scope),
            not_before=child.not_before, expires_at=child.expires_at, parent_id=parent.id,
            budget=child.budget)
        audit_record(tenant_id=principal.tenant_id, kind="grant.delegated", actor=principal.name,
                     at=now, details={"grant_id": grant.id, "parent_id": parent.id,
                                      "subject": subject.name, "operations": grant.operations,
                                      "scope": grant.scope, "budget": budget, **details})
        return grant
    # The order of docs/design.md#denials: a live grant that is too narrow says what widened.
    for code in (DenialCode.DELEGATION_WIDENS, DenialCode.AUTHORITY_REVOKED):
        found = next((d for d in refusals if d.code is code), None)
        if found is not None:
            raise found
    raise refusals[0]


def select_authority(contract: OperationContract, resolved: JSONObject) -> dict[str, str]:
    """The concrete values the arguments select for each authority key (docs/design.md#grants)."""
    selected: dict[str, str] = {}
    for requirement in contract.authority_requirements:
        value: JSONValue = resolved
        for token in requirement.pointer.split("/")[1:]:
            value = value[token.replace("~1", "/").replace("~0", "~")]
        selected[requirement.key] = str(value)
    return selected


def check_authority(
    runtime: Runtime, contract: OperationContract, principal: Principal,
    resolved: JSONObject, now: datetime, *, lock: bool = False,
) -> core.Grant:
    """The grant this action rests on now, or the denial that says why there is none.

    `lock=True` inside a claim's or decision's transaction: the grants read are share-locked,
    so a revocation committed before this read is seen and a later one waits
    (docs/design.md#dispatcher)."""
    return core.authorize(
        grants=grants_of(principal, lock=lock),
        subject=principal.id,
        operation=contract.qualified_name,
        effects=frozenset(e.value for e in contract.possible_effects),
        selected=select_authority(contract, resolved),
        tool_set=frozenset(principal.tools),
        policy=runtime.policy,
        now=now,
    )
