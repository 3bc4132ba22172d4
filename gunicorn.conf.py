"""gunicorn reads this file from its working directory by default: its own logs (the master's
start-up, worker boots and deaths) go out as the same JSON lines as the application's
(config/logging.py, docs/design.md#running), under the same LOG_FORMAT and LOG_LEVEL."""

import os

from config.logging import logging_config

_debug = os.environ.get("DJANGO_DEBUG", "").lower() in ("1", "true", "yes", "on")
logconfig_dict = logging_config(os.environ.get("LOG_FORMAT", "console" if _debug else "json"),
                                os.environ.get("LOG_LEVEL", "INFO"))


def on_starting(server: object) -> None:
    """The request counters of a previous run are not this run's: with PROMETHEUS_MULTIPROC_DIR
    set (dispatch/observability/traffic.py), its files are removed before any worker starts."""
    from pathlib import Path

    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        for stale in Path(folder).glob("*.db"):
            stale.unlink()
