"""Tenants, principals and bearer tokens (docs/design.md#principals, #running). Grants and roles:
`authority`."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from dispatch.models import ApiToken, Principal, Tenant
from dispatch.runtime import get_runtime
from dispatch.services.audit import audit_record
from dispatch.services.authority import require_role
from dispatch.store import principals
from protocols.denials import Denial, DenialCode
from protocols.roles import Role

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
    found = principals.token(lookup=lookup)  # one fixed query: every API request asks
    if found is None:
        return None
    secret_hash, principal = found
    if not hmac.compare_digest(secret_hash, _hash(secret)):
        return None
    user = principal.user  # loaded with it
    if user is not None and not user.is_active:
        return None  # a deactivated human's token stops at once, as their session does
    return principal


def token_revoke_all(*, principal: Principal, now: datetime) -> int:
    return ApiToken.objects.filter(principal=principal, revoked_at__isnull=True).update(
        revoked_at=now)


def agent_create(*, name: str, tenant: str, tools: Iterable[str],
                 actor: str = "") -> tuple[Principal, str]:
    """An agent whose tool set names registered operations only. Principal names are unique
    across tenants: a name in use is `schema_invalid` at `/name`. `actor` (`manage.py`, an
    admin's name): who provisions it, audited `agent.created` in the same transaction."""
    tools = get_runtime().require_operations(tools)
    try:
        with transaction.atomic():
            principal = Principal.objects.create(
                tenant=tenant_get_or_create(name=tenant), name=name,
                kind=Principal.Kind.AGENT, tools=tools,
            )
            if actor:
                audit_record(tenant_id=principal.tenant_id, kind="agent.created", actor=actor,
                             at=timezone.now(), details={"agent_id": principal.id,
                                                         "name": name, "tools": list(tools)})
            return principal, token_issue(principal=principal)
    except IntegrityError:  # the unique name (a race included): nothing was written
        raise Denial(DenialCode.SCHEMA_INVALID, f"A principal named {name!r} exists; names "
                     "are unique across tenants.", errors=[
            {"pointer": "/name", "message": "a principal with this name exists"}]) from None


def agent_provision(*, actor: Principal, name: str, tools: Iterable[str]) -> tuple[Principal, str]:
    """`agent_create` by an admin, in the admin's own tenant (docs/rest-api.md#admin)."""
    require_role(actor, Role.ADMIN)
    return agent_create(name=name, tenant=actor.tenant.name, tools=tools, actor=actor.name)


def agent_token_rotate(*, actor: Principal, agent_id: object, now: datetime) -> str:
    """A new bearer token for an agent of the admin's tenant, returned once; every token it
    held before is revoked in the same transaction, so the old one is refused from this
    commit on (`token_authenticate` reads only unrevoked tokens). Another tenant's agent, a
    human, a delegated step's sub-agent and a forged id are one `not_found`."""
    require_role(actor, Role.ADMIN)
    agent = Principal.objects.filter(id=agent_id, tenant_id=actor.tenant_id,
                                     kind=Principal.Kind.AGENT, subagent=False).first() \
        if isinstance(agent_id, str) else None
    if agent is None:
        raise Denial(DenialCode.NOT_FOUND, kind="agent", id=agent_id)
    with transaction.atomic():
        token_revoke_all(principal=agent, now=now)
        audit_record(tenant_id=agent.tenant_id, kind="agent.token_rotated", actor=actor.name,
                     at=now, details={"agent_id": agent.id, "name": agent.name})
        return token_issue(principal=agent)


def subagent_create(*, tenant_id: str, name: str, tools: Iterable[str]) -> Principal:
    """A sub-agent of a delegated workflow step (docs/design.md#delegation): an agent of the tenant
    with no bearer token (it acts only in the embedded runtime), whose tool set is the step's tools
    and whose only authority is the step's delegated grant. Marked `subagent`: no grant names it
    as subject but that one, no command runs as it, no form or list offers it."""
    return Principal.objects.create(tenant_id=tenant_id, name=name, kind=Principal.Kind.AGENT,
                                    tools=get_runtime().require_operations(tools),
                                    subagent=True)


def human_create(
    *, name: str, tenant: str, role: str, password: str, tools: Iterable[str] = (),
    email: str = "",
) -> tuple[Principal, str]:
    if role not in (*Role, "", "none"):
        raise ValueError(f"role must be {', '.join(Role)} or none")
    tools = get_runtime().require_operations(tools)
    with transaction.atomic():
        # `email`: where approval requests are sent (docs/design.md#notifications); optional.
        user = get_user_model().objects.create_user(username=name, password=password,
                                                    email=email)
        principal = Principal.objects.create(
            tenant=tenant_get_or_create(name=tenant), name=name, kind=Principal.Kind.HUMAN,
            role="" if role == "none" else role, user=user, tools=tools,
        )
        return principal, token_issue(principal=principal)


def principal_for_user(user: Any) -> Principal | None:
    if user is None or not user.is_authenticated:
        return None
    return Principal.objects.select_related("tenant").filter(user_id=user.pk).first()
