"""The emergency stop's one read on the hot path (docs/design.md#approval-policies,
#statement-layer): how many pauses are in force in a tenant, the counter on its row.
"""

from __future__ import annotations

import functools

from django.db import connection

from dispatch.store.sql import rows, statement


@functools.cache
def _tenant_pauses(vendor: str) -> str:
    lock = " FOR SHARE" if vendor == "postgresql" else ""
    return statement("tenant.pauses",
                     f'SELECT "pauses" FROM "dispatch_tenant" WHERE "id" = %(tenant_id)s{lock}')


def tenant_pauses(*, tenant_id: str) -> int:
    """How many pauses are in force in tenant `tenant_id`, its row share-locked on PostgreSQL
    until the caller's transaction ends: a pause or resume that committed first is read (a row
    waited for is read again), one that comes later waits for that commit. A `ValueError` for
    no such tenant."""
    [(in_force,)] = rows(_tenant_pauses(connection.vendor), {"tenant_id": tenant_id})
    return in_force  # type: ignore[no-any-return]  # the column's integer
