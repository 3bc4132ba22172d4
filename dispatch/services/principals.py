"""Tenants, principals, bearer tokens and grants (DESIGN §4, §10)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection, transaction

from dispatch.failpoints import failpoint
from dispatch.models import ApiToken, Grant, Principal, Tenant
from dispatch.services.access import access_grant_by_id
from dispatch.services.audit import audit_record
from dispatch.services.permits import permits_revoke_resting_on
from protocols import grants as core
from protocols.denials import Denial, DenialCode

TOKEN_PREFIX = "eac"  # noqa: S105 - a public prefix, not a secret


def tenant_get_or_create(*, name: str) -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(name=name)
    return tenant


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def token_issue(*, principal: Principal) -> str:
    """A new bearer token, returned once; only its hash is stored."""
    lookup = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    ApiToken.objects.create(principal=principal, lookup=lookup, secret_hash=_hash(secret))
    return f"{TOKEN_PREFIX}_{lookup}_{secret}"


def token_authenticate(raw: str) -> Principal | None:
    """The principal of a live token, or None. Constant-time on the secret."""
    prefix, _, rest = raw.partition("_")
    lookup, _, secret = rest.partition("_")
    if prefix != TOKEN_PREFIX or not lookup or not secret:
        return None
    token = ApiToken.objects.select_related("principal__user").filter(
        lookup=lookup, revoked_at__isnull=True).first()
    if token is None:
        return None
    if not hmac.compare_digest(token.secret_hash, _hash(secret)):
        return None
    user = token.principal.user
    if user is not None and not user.is_active:
        return None  # a deactivated human's token stops at once, as their session does
    return token.principal


def token_revoke_all(*, principal: Principal, now: datetime) -> int:
    return ApiToken.objects.filter(principal=principal, revoked_at__isnull=True).update(
        revoked_at=now)


def agent_create(*, name: str, tenant: str, tools: Iterable[str]) -> tuple[Principal, str]:
    with transaction.atomic():
        principal = Principal.objects.create(
            tenant=tenant_get_or_create(name=tenant), name=name,
            kind=Principal.Kind.AGENT, tools=sorted(set(tools)),
        )
        return principal, token_issue(principal=principal)


def human_create(
    *, name: str, tenant: str, role: str, password: str, tools: Iterable[str] = ()
) -> tuple[Principal, str]:
    if role not in ("operator", "admin", "", "none"):
        raise ValueError("role must be operator, admin or none")
    with transaction.atomic():
        user = get_user_model().objects.create_user(username=name, password=password)
        principal = Principal.objects.create(
            tenant=tenant_get_or_create(name=tenant), name=name, kind=Principal.Kind.HUMAN,
            role="" if role == "none" else role, user=user, tools=sorted(set(tools)),
        )
        return principal, token_issue(principal=principal)


def principal_for_user(user: Any) -> Principal | None:
    if user is None or not user.is_authenticated:
        return None
    return Principal.objects.select_related("tenant").filter(user_id=user.pk).first()


def has_role(principal: Principal, role: str) -> bool:
    """An admin holds every right of an operator (DESIGN §7)."""
    if principal.kind != Principal.Kind.HUMAN:
        return False
    if principal.role == "admin":
        return True
    return bool(role) and principal.role == role


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
    )


# Every grant of a subject, or one grant, with all the grants it was delegated from, in one
# statement; ordered by id so that locks (below) are always taken in one order.
_CHAIN_SQL = """
WITH RECURSIVE chain(id) AS (
    SELECT id FROM {table} WHERE {start} = %s
    UNION
    SELECT g.parent_id FROM {table} g JOIN chain c ON g.id = c.id WHERE g.parent_id IS NOT NULL
)
SELECT * FROM {table} WHERE id IN (SELECT id FROM chain) ORDER BY id{lock}"""


def _grant_chain(start: str, value: str, *, lock: bool) -> list[Grant]:
    """The grants selected by `start = value` and their ancestors.

    With `lock`, inside the caller's transaction, PostgreSQL share-locks every row in id order:
    a revocation (which locks the same rows for update, in the same order) either committed
    before this read and is seen, or waits until this transaction ends. Several claims share
    the lock. SQLite needs none: its transactions begin IMMEDIATE, holding the write lock.
    """
    locking = lock and connection.vendor == "postgresql"
    sql = _CHAIN_SQL.format(table=connection.ops.quote_name(Grant._meta.db_table), start=start,
                            lock=" FOR SHARE" if locking else "")
    return list(Grant.objects.raw(sql, [value]))


def _effective(rows: list[Grant], wanted: Callable[[Grant], bool]) -> list[core.Grant]:
    by_id = {row.id: as_core(row) for row in rows}
    return [core.with_ancestry(by_id[row.id], by_id) for row in rows if wanted(row)]


def grants_of(principal: Principal, *, lock: bool = False) -> list[core.Grant]:
    """The principal's grants as authority sees them: a grant is revoked or expired when any
    grant it was delegated from is (DESIGN §6). `lock`: see `_grant_chain`."""
    rows = _grant_chain("subject_id", principal.id, lock=lock)
    return _effective(rows, lambda row: row.subject_id == principal.id)


def grant_effective(grant_id: str, *, lock: bool = False) -> core.Grant:
    """One grant with its ancestry, as `grants_of` sees it."""
    rows = _grant_chain("id", grant_id, lock=lock)
    return _effective(rows, lambda row: row.id == grant_id)[0]


def grant_issue(
    *, issuer: str, subject: Principal, operations: Iterable[str], scope: dict[str, Any],
    now: datetime, expires_in: int | None = None,
) -> Grant:
    """Issue a root grant. Only the host's authorization service (admins, commands) calls this."""
    parsed = core.parse_scope(scope)
    with transaction.atomic():
        grant = Grant.objects.create(
            tenant_id=subject.tenant_id, issuer=issuer, subject=subject,
            operations=sorted(set(operations)), scope=scope_json(parsed),
            not_before=now, expires_at=None if expires_in is None else now + timedelta(
                seconds=expires_in),
        )
        audit_record(tenant_id=subject.tenant_id, kind="grant.issued", actor=issuer, at=now,
                     details={"grant_id": grant.id, "subject": subject.name,
                              "operations": grant.operations, "scope": grant.scope})
    return grant


def grant_revoke(*, actor: Principal, grant_id: object, now: datetime) -> Grant:
    """Revoke a grant of the actor's tenant and every grant delegated from it."""
    if not has_role(actor, "admin"):
        raise Denial(DenialCode.ROLE_REQUIRED, role="admin")
    return grant_revoke_tree(grant=access_grant_by_id(actor, grant_id), actor_name=actor.name,
                             now=now)


def grant_revoke_tree(*, grant: Grant, actor_name: str, now: datetime) -> Grant:
    """Revoke `grant`, every grant delegated from it and every unclaimed permit minted under any
    of them, in one transaction, with one `grant.revoked` event.

    Revocation wins every race (DESIGN §5): the tree is locked for update in id order, the
    order in which claims, decisions and delegations share-lock the grants they rest on, so
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
    """A narrower child of the actor's own grant; `delegation_widens` otherwise."""
    parent = access_grant_by_id(actor, grant_id)
    if parent.subject_id != actor.id:
        raise Denial(DenialCode.NOT_FOUND, kind="grant", id=grant_id)
    subject = Principal.objects.filter(name=subject_name, tenant_id=actor.tenant_id).first()
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
            operations=sorted(child.operations), scope=scope_json(child.scope),
            not_before=child.not_before, expires_at=child.expires_at, parent=parent,
        )
        audit_record(tenant_id=actor.tenant_id, kind="grant.delegated", actor=actor.name,
                     at=now, details={"grant_id": grant.id, "parent_id": parent.id,
                                      "subject": subject.name, "operations": grant.operations,
                                      "scope": grant.scope})
    return grant


def scope_json(scope: core.Scope) -> dict[str, Any]:
    return {k: v if v == "*" else sorted(v) for k, v in scope.items()}
