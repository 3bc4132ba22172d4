from __future__ import annotations

from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The demo's management commands: `seed_demo`, `run_destinations`, `destinations`."""

    name = "demo"
