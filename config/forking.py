"""No database connection, pooled or not, crosses a `fork()` (docs/deployment.md#connection-budget).

A psycopg pool (`OPTIONS["pool"]`, PostgreSQL) keeps its connections open when Django closes
one, so closing is not enough before a fork: the pool itself is closed, and each process makes
its own on first use.
"""

from __future__ import annotations

from django.db import connections


def close_before_fork() -> None:
    """In the process about to fork: close every connection and every pool."""
    for conn in connections.all(initialized_only=True):
        conn.close()
        close_pool = getattr(conn, "close_pool", None)
        if close_pool is not None:
            close_pool()


def forget_after_fork() -> None:
    """In a forked child: drop, without closing, what the parent may have left open (its
    sockets are the parent's); the child connects afresh on first use."""
    for conn in connections.all(initialized_only=True):
        conn.connection = None
    pools = getattr(type(connections["default"]), "_connection_pools", None)
    if isinstance(pools, dict):
        pools.clear()
