"""The ids a log line carries where they apply (docs/design.md#running): bound in contextvars,
so every line logged in the same request or task has them, whoever logs it. Ids only: never a
token, a permit id or a value. Requests and tasks clear them at their start and end
(config.middleware, config/celery_logging.py). The same ids are noted on the current span of a
trace, when there is one (dispatch.observability.tracing)."""

from __future__ import annotations

import structlog

from dispatch.observability.tracing import note


def bind_ids(**ids: str | None) -> None:
    """Bind the given ids (`tenant`, `principal`, `proposal_id`, `operation_id`) to the log
    lines and note them on the current span; None or "" is left out."""
    present = {k: v for k, v in ids.items() if v}
    if present:
        structlog.contextvars.bind_contextvars(**present)
        note(**present)


def clear_ids() -> None:
    structlog.contextvars.clear_contextvars()
