"""Fixed-shape SQL for the hot path (DESIGN §5: close to what the database itself can do).

The statements of a dispatched action (claim, attempt start, outcome, audit) are written once,
as explicit SQL, in the owner module of each record kind; this module gives them what they
share: a cursor, and values prepared by the model fields themselves (`get_db_prep_save`), so
a row written here reads back exactly like one the ORM wrote. On PostgreSQL a move that writes
several rows is one data-modifying CTE (one round trip); SQLite, in-process, runs the same
statements one by one. Everything that is not hot stays on the ORM.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Field, Model


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


@functools.cache
def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field)
    return field


def value(model: type[Model], name: str, raw: Any) -> Any:
    """`raw` as the database stores `model.name` (a datetime in UTC, JSON, ...)."""
    return _field(model, name).get_db_prep_save(raw, connection)


def run(sql: str, params: Sequence[Any]) -> int:
    """Execute one statement; the number of rows it changed."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def rows(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Execute one statement that returns rows (a SELECT, or anything with RETURNING)."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())
