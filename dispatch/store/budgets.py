"""Budget counters (docs/design.md#budgets): the one conditional upsert that adds a cost to
several counters at once, each only while it stays within its limit, and answers which took it
(`dispatch.services.budgets.counters_take` decides what a counter that did not means).

The statement is a family derived from the number of counters taken at once, each member built
and declared when first needed. Its parameters stay positional (`%s`, a `(key, cost, limit)`
triple per counter, in order): they are all values of the call, so names would only add a
mapping to build on every claim.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from django.db import connection

from dispatch.models import BudgetCounter
from dispatch.store.sql import rows, statement


@functools.cache
def upsert_sql(counters: int, *, rebind: bool = False) -> str:
    """SQLite >= 3.35 and PostgreSQL: a conflicting row is updated only while it stays within
    its limit, and RETURNING names exactly the counters that took the cost. `rebind`: the
    limit given binds, not the stored one, and is stored with the sum (a spend cap whose sum
    the deployment changed binds the window already counted at once). Only quoted identifiers
    and placeholders are formatted in; every value is a bound parameter."""
    q = connection.ops.quote_name
    table, key, used, limit = (q(BudgetCounter._meta.db_table), q("key"), q("used"),
                               q("limit"))
    values = ", ".join(["(%s, %s, %s)"] * counters)
    bound, also = ((f"excluded.{limit}", f", {limit} = excluded.{limit}") if rebind
                   else (f"{table}.{limit}", ""))
    return statement(
        f"budget.take.{counters}{'.rebind' if rebind else ''}", derived=True,
        sql=f"INSERT INTO {table} ({key}, {used}, {limit}) VALUES {values} "
        f"ON CONFLICT ({key}) DO UPDATE SET {used} = {table}.{used} + excluded.{used}{also} "
        f"WHERE {table}.{used} + excluded.{used} <= {bound} RETURNING {key}")


def take(*, charges: Sequence[tuple[str, int, int]], rebind: bool = False) -> set[str]:
    """Add each `(key, cost, limit)`'s cost to its counter (a new counter starts at it), in the
    order given, each only while it stays within its limit (`rebind`: the limit given, also
    stored; else the stored one); the keys of the counters that took their cost. Inside the
    caller's transaction, whose rollback undoes it. At least one charge, each key once."""
    params = [value for charge in charges for value in charge]
    return {row[0] for row in rows(upsert_sql(len(charges), rebind=rebind), params)}
