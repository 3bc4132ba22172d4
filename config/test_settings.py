"""Settings for the test suite: the project settings with test-friendly environment defaults.

`DATABASE_URL` chooses the backend (unset: SQLite, the same suite runs again on PostgreSQL).
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_DEBUG", "1")
os.environ.setdefault("HANDLER_TIMEOUT_CAP", "3")
os.environ.setdefault("RETRY_BACKOFF_SECONDS", "0.05")
# One SQLite test database file per test run, so concurrent runs never share one.
os.environ.setdefault("SQLITE_TEST_NAME", f"test-{os.getpid()}.sqlite3")
os.environ.setdefault("PG_TEST_NAME", f"test_console_{os.getpid()}")
# Warnings and errors only from the test processes and the servers they start (a test that
# reads request lines asks for INFO).
os.environ.setdefault("LOG_LEVEL", "WARNING")
# The demo is an extension the tests ask for (an explicit value, even empty, is kept).
os.environ.setdefault("DISPATCH_EXTENSIONS", "demo.extension")

from config.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast; tests only
# Failpoints fire here only: crashes, pauses and payload tampering chosen by the environment of
# the process under test (tests/support/failpoints.py). The production settings name none.
FAILPOINTS = "tests.support.failpoints"
