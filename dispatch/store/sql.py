"""What the store's statements share (docs/design.md#statement-layer: close to what the database
itself can do).

The statements of a decision and of a dispatched action (the votes, the permit, the claim, the
attempts, the outcome, the resources' moves, the audit, and the loads the checks need) are
written once, as explicit SQL with named parameters (`%(name)s`), in `dispatch.store`, and
declared here (`statement`, `STATEMENTS`); this module gives them what they share: a cursor,
values prepared by the model fields themselves (`get_db_prep_save`), so that a row written
here reads back exactly like one the ORM wrote, rows turned into model instances without the
query compiler, and one fixed INSERT per model (`insert`). On PostgreSQL a move that writes
several rows is one data-modifying CTE (one round trip) of the same statements; SQLite,
in-process, runs them one by one. Everything that is not hot stays on the ORM.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model

M = TypeVar("M", bound=Model)
#: A statement's parameters: by name (`%(name)s`), or by position (`%s`) for the budget's
#: upsert, whose values are all the call's own (a mapping would be built on every claim).
Params = Mapping[str, Any] | Sequence[Any]


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


def _db() -> BaseDatabaseWrapper:
    """This thread's connection itself. `connection` is a proxy that looks the thread's
    connection up again on every attribute read (and so does each method of Django's that is
    handed the proxy): a statement's values and rows, which read it dozens of times an
    action, ask once."""
    return connections[DEFAULT_DB_ALIAS]


@functools.cache
def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field)
    return field


def value(model: type[Model], name: str, raw: Any) -> Any:
    """`raw` as the database stores `model.name` (a datetime in UTC, JSON, ...)."""
    return _field(model, name).get_db_prep_save(raw, _db())


@dataclass(frozen=True)
class Statement:
    sql: str
    vendor: str | None  # the one backend it is written for (a data-modifying CTE); None: both
    derived: bool  # one of a family derived from a parameter (a resource move per event)


#: Every fixed-shape write and read of the hot path, by name, as its owner module declares it:
#: what `tests/db/test_statement_layer.py` runs on each backend and checks against the models.
STATEMENTS: dict[str, Statement] = {}


def statement(name: str, sql: str, *, vendor: str | None = None, derived: bool = False) -> str:
    """Declare one statement of the hot path (`STATEMENTS`); returns its SQL. A `derived`
    statement is one of a family built from a parameter when first needed (a resource move per
    event, a budget take per number of counters); one derived from registered tables is
    declared again when they grow."""
    STATEMENTS[name] = Statement(sql, vendor, derived)
    return sql


@contextlib.contextmanager
def pipelined() -> Iterator[None]:
    """Inside the caller's transaction: PostgreSQL is sent the unconditional writes made with
    `write` (inserts) without waiting for each answer (psycopg's pipeline mode), so several
    cost one round trip together. Every other statement inside, ours or the ORM's, waits for
    its answer as outside (the pipeline is synced after it): a guard's row count is read,
    never guessed. An error surfaces by the next such statement or the end of the block, as
    Django's error (an `IntegrityError` stays one), and rolls the transaction back as any
    other. SQLite, in-process, runs them as they come."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("pipelined writes run inside their caller's transaction")
    if not is_postgres() or _PIPELINE.get() is not None:
        yield
        return
    with (connection.wrap_database_errors, connection.connection.pipeline() as pipeline,
          connection.execute_wrapper(functools.partial(_answered, pipeline))):
        token = _PIPELINE.set(pipeline)
        try:
            yield
        finally:
            _PIPELINE.reset(token)


_PIPELINE: ContextVar[Any] = ContextVar("statements_pipeline", default=None)  # one at a time
_UNANSWERED: ContextVar[bool] = ContextVar("statements_unanswered", default=False)


def _answered(pipeline: Any, execute: Callable[..., Any], sql: str, params: Any, many: bool,
              context: Any) -> Any:
    """Inside `pipelined`: every statement but a `write` waits for its answer."""
    result = execute(sql, params, many, context)
    if not _UNANSWERED.get():
        pipeline.sync()
    return result


def run(sql: str, params: Params) -> int:
    """Execute one statement; the number of rows it changed."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def write(sql: str, params: Params) -> None:
    """Execute one unconditional write whose row count nobody reads (an insert): inside
    `pipelined` it does not wait for its answer."""
    token = _UNANSWERED.set(True)
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
    finally:
        _UNANSWERED.reset(token)


def rows(sql: str, params: Params) -> list[tuple[Any, ...]]:
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
    return _instance(model, values, _db())


def _instance(model: type[M], values: Sequence[Any], db: BaseDatabaseWrapper) -> M | None:
    shape = _shape(model, db.vendor)
    if values[0] is None and model._meta.concrete_fields[0].primary_key:
        return None
    converted = []
    for raw, (expression, converters) in zip(values, shape.converters, strict=True):
        for converter in converters:
            raw = converter(raw, expression, db)
        converted.append(raw)
    return model.from_db(db.alias, list(shape.attnames), converted)


def instances(row: Sequence[Any], *models: type[Model]) -> list[Any]:
    """A joined row (each model's `columns`, in the order given) as one instance per model,
    as `instance` makes them (None for an outer join that found nothing)."""
    db = _db()
    found, at = [], 0
    for model in models:
        size = len(_shape(model, db.vendor).columns)
        found.append(_instance(model, row[at:at + size], db))
        at += size
    return found


def cache_related(owner: Model, name: str, related: Model | None) -> None:
    """What select_related does: `owner.name` answers without a query (None: none exists)."""
    owner._state.fields_cache[name] = related


# --- fixed-shape inserts: one INSERT of every column per model ----------------------------------


@functools.cache
def _insert_sql(model: type[Model]) -> str:
    names = ", ".join(f'"{column}"' for column in _shape(model, connection.vendor).columns)
    marks = ", ".join(["%s"] * width(model))
    # Only the model's own table and column names are formatted in; every value is bound.
    return statement(f"{model._meta.model_name}.insert",
                     f'INSERT INTO "{model._meta.db_table}" ({names}) VALUES ({marks})')


def insert(obj: M) -> M:
    """Write the new row `obj` with its model's one fixed INSERT, each value prepared by its
    field as `Model.save` would (defaults, `auto_now`); `obj` is then as if loaded. No query is
    compiled: the hot path's rows (a vote, a decision, a permit) cost one execute."""
    fields = obj._meta.concrete_fields
    if obj._meta.pk.db_returning:
        raise TypeError(f"{type(obj).__name__}: insert writes rows whose id is ours, not the "
                        "database's")
    db = _db()
    write(_insert_sql(type(obj)),
          [field.get_db_prep_save(field.pre_save(obj, True), db) for field in fields])
    obj._state.adding, obj._state.db = False, db.alias
    return obj

