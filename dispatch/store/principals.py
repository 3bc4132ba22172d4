"""A bearer token's load (docs/design.md#statement-layer): every API request asks who it is, so
one fixed query answers with the token's hash, its principal and the principal's user. And a
principal by id: what a worker given a `dispatch_on_approval` grant runs it as.
"""

from __future__ import annotations

import functools

from django.contrib.auth import get_user_model
from django.db import connection

from dispatch.models import Principal
from dispatch.store.sql import cache_related, columns, instance, instances, rows, statement

User = get_user_model()


@functools.cache
def _token(vendor: str) -> str:
    return statement(
        "token.load",
        f"SELECT t.\"secret_hash\", {columns(Principal, 'p')}, {columns(User, 'u')} "
        'FROM "dispatch_apitoken" t JOIN "dispatch_principal" p ON p."id" = t."principal_id" '
        f'LEFT JOIN "{User._meta.db_table}" u ON u."id" = p."user_id" '
        'WHERE t."lookup" = %(lookup)s AND t."revoked_at" IS NULL')


def token(*, lookup: str) -> tuple[str, Principal] | None:
    """The live (unrevoked) token `lookup`'s secret hash and principal, the principal's user
    cached (None for an agent); None when no live token has that lookup."""
    found = rows(_token(connection.vendor), {"lookup": lookup})
    if not found:
        return None
    secret_hash, *row = found[0]
    principal, user = instances(row, Principal, User)
    cache_related(principal, "user", user)
    return secret_hash, principal


@functools.cache
def _principal(vendor: str) -> str:
    return statement("principal.load",
                     f'SELECT {columns(Principal, "p")} FROM "dispatch_principal" p '
                     'WHERE p."id" = %(id)s')


def principal(*, id: str) -> Principal | None:
    """Principal `id`, or None when there is none."""
    found = rows(_principal(connection.vendor), {"id": id})
    return instance(Principal, found[0]) if found else None
