from __future__ import annotations

import sqlite3
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks

# The claim's budget upsert uses INSERT .. ON CONFLICT .. DO UPDATE .. RETURNING.
SQLITE_MINIMUM = (3, 35)


class DispatchConfig(AppConfig):
    name = "dispatch"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        checks.register(check_sqlite_version)
        checks.register(check_source_allowlist)
        # Register the tasks in every process (web included), so that `dispatch.queue` finds
        # them by name: services hand work to a worker without importing the tasks module.
        import dispatch.tasks  # noqa: F401


def check_sqlite_version(**_: Any) -> list[checks.CheckMessage]:
    engine = settings.DATABASES["default"]["ENGINE"]
    if engine.endswith("sqlite3") and sqlite3.sqlite_version_info < SQLITE_MINIMUM:
        return [checks.Error(
            f"SQLite {sqlite3.sqlite_version} is too old: the dispatcher needs "
            f"{'.'.join(map(str, SQLITE_MINIMUM))} or newer (upsert with RETURNING).",
            hint="Use a Python built against a newer SQLite, or PostgreSQL.",
            id="dispatch.E001")]
    return []


def check_source_allowlist(**_: Any) -> list[checks.CheckMessage]:
    """Every `EVIDENCE_SOURCE_ALLOWLIST` entry is one `protocols.sources` can match: an entry
    it must ignore would silently shrink the list."""
    from protocols.sources import allowlist_entry_problem

    return [checks.Error(f"EVIDENCE_SOURCE_ALLOWLIST entry {entry!r} cannot be used: {problem}.",
                         hint="Name a scheme, a host, an optional port and a path prefix, "
                              "e.g. https://docs.example.org/public/",
                         id="dispatch.E002")
            for entry in settings.EVIDENCE_SOURCE_ALLOWLIST
            if (problem := allowlist_entry_problem(entry)) is not None]
