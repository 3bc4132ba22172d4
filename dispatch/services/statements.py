"""Fixed-shape SQL for the hot path (docs/design.md#write-transactions: close to what the database
itself can do).

The statements of a dispatched action (claim, attempt start, outcome, audit) are written once,
as explicit SQL, in the owner module of each record kind; this module gives them what they
share: a cursor, and values prepared by the model fields themselves (`get_db_prep_save`), so
a row written here reads back exactly like one the ORM wrote. On PostgreSQL a move that writes
several rows is one data-modifying CTE (one round trip); SQLite, in-process, runs the same
statements one by one. Everything that is not hot stays on the ORM.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connection
from django.db.models import Field, Model

M = TypeVar("M", bound=Model)


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


# --- fixed-shape reads: explicit SELECTs whose rows become model instances -------------------

Converter = Callable[[Any, Any, Any], Any]


@dataclass(frozen=True)
class _Shape:
    attnames: tuple[str, ...]
    columns: tuple[str, ...]
    converters: tuple[tuple[Any, tuple[Converter, ...]], ...]  # (expression, converters)


@functools.cache
def _shape(model: type[Model], vendor: str) -> _Shape:
    fields = model._meta.concrete_fields
    converters = []
    for field in fields:
        column = field.get_col(model._meta.db_table)
        found = [*connection.ops.get_db_converters(column),
                 *column.get_db_converters(connection)]
        converters.append((column, tuple(found)))
    return _Shape(tuple(f.attname for f in fields), tuple(str(f.column) for f in fields),
                  tuple(converters))


def columns(model: type[Model], alias: str) -> str:
    """The SELECT list of every column of `model`, from the table aliased `alias`."""
    return ", ".join(f'{alias}."{column}"'
                     for column in _shape(model, connection.vendor).columns)


def width(model: type[Model]) -> int:
    return len(_shape(model, connection.vendor).columns)


def instance(model: type[M], values: Sequence[Any]) -> M | None:
    """The row `values` (in `columns` order) as an instance, as the ORM would load it; None
    for the NULLs of an outer join that found nothing."""
    shape = _shape(model, connection.vendor)
    if values[0] is None and model._meta.concrete_fields[0].primary_key:
        return None
    converted = []
    for raw, (expression, converters) in zip(values, shape.converters, strict=True):
        for converter in converters:
            raw = converter(raw, expression, connection)
        converted.append(raw)
    return model.from_db(connection.alias, list(shape.attnames), converted)


def cache_related(owner: Model, name: str, related: Model | None) -> None:
    """What select_related does: `owner.name` answers without a query (None: none exists)."""
    owner._state.fields_cache[name] = related
