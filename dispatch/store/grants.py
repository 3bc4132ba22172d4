"""A grant's ancestry (docs/design.md#grants): the grants a read selects and every grant each was
delegated from, in one recursive statement, share-locked inside a claim's or a decision's
transaction so that a revocation always wins (`dispatch.services.authority` decides on them).
"""

from __future__ import annotations

import functools
from typing import Literal

from django.db import connection

from dispatch.models import Grant
from dispatch.store.sql import columns, instance, rows, statement

#: The column a chain starts from: one grant (`id`), or every grant of a subject.
Start = Literal["id", "subject_id"]

# Every grant of a subject, or one grant, with all the grants it was delegated from, in one
# statement; ordered by id so that locks (below) are always taken in one order.
_CHAIN_SQL = """
WITH RECURSIVE chain(id) AS (
    SELECT id FROM {table} WHERE {start} = %(value)s
    UNION
    SELECT g.parent_id FROM {table} g JOIN chain c ON g.id = c.id WHERE g.parent_id IS NOT NULL
)
SELECT {columns} FROM {table} g WHERE g.id IN (SELECT id FROM chain) ORDER BY g.id{lock}"""


@functools.cache
def _chain_sql(vendor: str, start: Start, lock: bool) -> str:
    """The chain's statement for `vendor`, from `start`: a family of four, each declared when
    first needed (its column list is the model's, known once the apps are)."""
    name = f"grant.chain_by_{start}{'.locked' if lock else ''}"
    return statement(name, derived=True, sql=_CHAIN_SQL.format(
        table=connection.ops.quote_name(Grant._meta.db_table), start=start,
        columns=columns(Grant, "g"), lock=" FOR SHARE" if lock and vendor == "postgresql" else ""))


def chain(*, start: Start, value: str, lock: bool) -> list[Grant]:
    """The grants selected by `start = value` and their ancestors, in id order.

    With `lock`, inside the caller's transaction, PostgreSQL share-locks every row in id order:
    a revocation (which locks the same rows for update, in the same order) either committed
    before this read and is seen, or waits until this transaction ends. Several claims share
    the lock. SQLite needs none: its transactions begin IMMEDIATE, holding the write lock.
    """
    found = [instance(Grant, row)
             for row in rows(_chain_sql(connection.vendor, start, lock), {"value": value})]
    return [grant for grant in found if grant is not None]
