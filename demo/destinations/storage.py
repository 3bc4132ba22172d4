"""SQLite files the destinations keep their records in, outside the dispatcher's database.

Each destination owns one file in a directory given on the command line. Writers use WAL, a busy
timeout and ``synchronous=FULL``, and every write is committed before the destination replies,
so a client that sees an answer (or loses one) can always find the effect by a lookup. Readers
open the file read-only and treat a missing file or table as "nothing recorded", so lookups work
whether or not the servers are running.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeAlias

__all__ = ["StrPath", "initialize", "insert_once", "read_rows", "write_transaction"]

StrPath: TypeAlias = str | os.PathLike[str]
"""A directory argument: a ``str`` or any path-like object."""

BUSY_TIMEOUT_MS = 10_000


def _connect(path: Path) -> sqlite3.Connection:
    """Open a read-write connection in autocommit mode; transactions are explicit."""
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    # FULL makes each WAL commit durable before COMMIT returns, i.e. before any reply is sent.
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def initialize(path: Path, schema: str) -> None:
    """Create ``path`` (and its directory) in WAL mode and apply the idempotent ``schema``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = _connect(path)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(schema)
    finally:
        conn.close()


@contextlib.contextmanager
def write_transaction(path: Path) -> Iterator[sqlite3.Connection]:
    """Yield a connection inside ``BEGIN IMMEDIATE``; commit on success, roll back on error.

    ``IMMEDIATE`` takes the write lock up front, so a read-check-write inside the block (such as
    "has this key been seen?") cannot interleave with another writer. The commit has happened
    when the ``with`` block exits, which is what lets callers reply only afterwards.
    """
    conn = _connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    finally:
        conn.close()


def insert_once(
    path: Path, *, select_by_key: str, insert: str, key: str, values: Sequence[object]
) -> tuple[sqlite3.Row, bool]:
    """Insert ``values`` unless ``select_by_key`` finds ``key``; return the row and ``created``.

    The receiver-side deduplication of the bank and the publisher: the existence check and the
    insert share one ``BEGIN IMMEDIATE`` transaction, so concurrent requests with one key
    serialize here and exactly one inserts. Committed on return.
    """
    with write_transaction(path) as conn:
        existing = conn.execute(select_by_key, (key,)).fetchone()
        if existing is not None:
            return existing, False
        conn.execute(insert, values)
        return conn.execute(select_by_key, (key,)).fetchone(), True


def read_rows(path: Path, sql: str, params: Sequence[object] = ()) -> list[sqlite3.Row]:
    """Run a query on a read-only connection; a missing file or table yields no rows."""
    if not path.exists():
        return []
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.OperationalError:
        # Removed between the check and the open: nothing recorded.
        return []
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):
            return []
        raise
    finally:
        conn.close()
