"""Settings for the test suite: the project settings with test-friendly environment defaults.

`DATABASE_URL` chooses the backend (unset: SQLite, the same suite runs again on PostgreSQL).
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_DEBUG", "1")
os.environ.setdefault("HANDLER_TIMEOUT_CAP", "3")
os.environ.setdefault("RETRY_BACKOFF_SECONDS", "0.05")

from config.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast; tests only
