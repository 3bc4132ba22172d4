"""The heartbeat file a long-running process touches while it works (`HEARTBEAT_FILE`): a
container's liveness probe reads its age with nothing of the application loaded
(deploy/probe.py), where asking the process itself would boot a client (a Celery `inspect
ping` took 1.1 s and 68 MB a probe, docs/deployment.md#probes)."""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings

logger = logging.getLogger(__name__)


def heartbeat_touch() -> None:
    """Set the heartbeat file's time to now (creating it); a failure is logged, never raised:
    the probe reports the stale file."""
    path = settings.HEARTBEAT_FILE
    if not path:
        return
    try:
        Path(path).touch()
    except OSError as error:
        logger.warning("cannot touch the heartbeat file %s: %s", path, error.strerror or error)
