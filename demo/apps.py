from __future__ import annotations

from django.apps import AppConfig
from django.core import checks


class DemoConfig(AppConfig):
    """The demo's management commands (`seed_demo`, `run_destinations`, `destinations`) and
    its system check of `EVIDENCE_SOURCE_ALLOWLIST`."""

    name = "demo"

    def ready(self) -> None:
        from demo.hooks import check_source_allowlist

        checks.register(check_source_allowlist)
