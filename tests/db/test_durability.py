"""Durable by default: a committed intent survives a power loss on either database."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def test_a_commit_waits_for_the_disk() -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            # WAL with NORMAL loses the last commits on power loss; FULL (2) syncs each one.
            cursor.execute("PRAGMA synchronous")
            assert cursor.fetchone()[0] == 2
            cursor.execute("PRAGMA journal_mode")
            assert cursor.fetchone()[0] == "wal"
        else:
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone()[0] == "on"
