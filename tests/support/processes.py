"""Helpers for tests that run Django code in separate OS processes on the test database."""

from __future__ import annotations

import os
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def python_path() -> str:
    """`PYTHONPATH` of a child process: the project, and the Python client from its source (the
    demo destinations verify permit tokens with it, and an installed client may be another
    checkout's)."""
    return os.pathsep.join([ROOT, os.path.join(ROOT, "clients", "python")])


def database_url() -> str:
    """A URL for the database the current test is using (the test database, not the real one)."""
    from django.db import connection

    cfg: dict[str, Any] = connection.settings_dict
    if cfg["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{cfg['NAME']}"
    auth = cfg["USER"] or "postgres"
    if cfg.get("PASSWORD"):
        auth += f":{cfg['PASSWORD']}"
    return f"postgres://{auth}@{cfg['HOST'] or '127.0.0.1'}:{cfg['PORT'] or 5432}/{cfg['NAME']}"


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a child process: same settings, the test database, our destinations."""
    from django.conf import settings

    dest = settings.DESTINATIONS
    return {
        **os.environ,
        "PYTHONPATH": python_path(),
        "DJANGO_SETTINGS_MODULE": "config.test_settings",
        "DATABASE_URL": database_url(),
        "DESTINATIONS_DIR": str(dest["dir"]),
        "SMTP_SINK_HOST": str(dest["smtp_host"]),
        "SMTP_SINK_PORT": str(dest["smtp_port"]),
        "BANK_URL": str(dest["bank_url"]),
        # A test that sets the destinations by hand may leave these out (it uses none of them);
        # the child then keeps their defaults.
        **{name: str(dest[key]) for name, key in (("SMTP_SINK_LOOKUP_URL", "smtp_lookup_url"),
                                                  ("PUBLISHER_URL", "publisher_url"),
                                                  ("SOURCES_URL", "sources_url"))
           if key in dest},
        **extra,
    }


def setup_child(env: dict[str, str]) -> None:
    """Inside a spawned child: adopt the parent's environment and start Django."""
    os.environ.clear()
    os.environ.update(env)
    import django

    django.setup()
