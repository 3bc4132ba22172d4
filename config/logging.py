"""Logs as JSON lines (docs/design.md#running): one configuration for Django's, Celery's,
gunicorn's and our own loggers, through structlog's `ProcessorFormatter`.

Every line carries `timestamp`, `level`, `logger` and `event`, and, where they apply, the ids
bound in `structlog.contextvars`: `request_id`, `tenant`, `principal` (config.middleware and the
API's authenticators), `proposal_id`, `operation_id`, `task_id` (the dispatcher, the worker and
config/celery.py). Nothing logs a token, a permit id, a password or an argument value; the
`redact` processor is the backstop that removes secret-looking keys and the shapes of tokens and
permit ids from whatever is logged, and exceptions are logged as their type and stack, never
their message (which may quote a value).

`LOG_FORMAT=console` renders the same events for a person (the default under DJANGO_DEBUG).
"""

from __future__ import annotations

import logging.config
import re
from collections.abc import Mapping, MutableMapping
from types import TracebackType
from typing import Any

import structlog

#: Key names whose values are never logged (a substring, case-insensitive).
SECRET_KEYS = ("password", "passwd", "secret", "token", "authorization", "api_key", "cookie",
               "session", "permit", "argument", "payload", "credential", "csrf")
REDACTED = "[redacted]"
#: Shapes of secrets in free text: a bearer token (`eac_<lookup>_<secret>`), a permit id, and
#: whatever follows `Bearer`.
_SECRET_SHAPES = (
    (re.compile(r"\beac_[0-9a-f]+_[A-Za-z0-9_-]+"), "eac_" + REDACTED),
    (re.compile(r"\bprm_[A-Za-z0-9]+"), "prm_" + REDACTED),
    # RFC 6750's token68 characters (and the brackets of a token masked above).
    (re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/\[\]-]+=*"), "Bearer " + REDACTED),
)
#: Fields a line keeps whatever their name says (they are ids or our own vocabulary).
_KEPT = frozenset({"event", "logger", "level", "timestamp", "request_id", "tenant", "principal",
                   "proposal_id", "operation_id", "task_id", "exception_chain"})

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        for shape, replacement in _SECRET_SHAPES:
            value = shape.sub(replacement, value)
        return value
    if isinstance(value, Mapping):
        return {k: (REDACTED if _secret_key(k) else _scrub(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


def _secret_key(key: object) -> bool:
    name = str(key).lower()
    return name not in _KEPT and any(word in name for word in SECRET_KEYS)


def redact(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]
           ) -> MutableMapping[str, Any]:
    """The backstop: secret-named keys lose their values, secret-shaped text is masked."""
    for key in list(event_dict):
        if key.startswith("_"):
            continue
        event_dict[key] = REDACTED if _secret_key(key) else _scrub(event_dict[key])
    return event_dict


def _exc_info(value: Any) -> ExcInfo | None:
    if isinstance(value, BaseException):
        return type(value), value, value.__traceback__
    if isinstance(value, tuple) and len(value) == 3 and value[0] is not None:
        return value
    if value is True:
        import sys

        found = sys.exc_info()
        return found if found[0] is not None else None
    return None


def exception_without_message(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]
                              ) -> MutableMapping[str, Any]:
    """An exception as its type and the frames it passed (file, line, function), chained causes
    included: never its message or the frames' locals, which may hold a value."""
    found = _exc_info(event_dict.pop("exc_info", None))
    event_dict.pop("exception", None)
    if found is None:
        return event_dict
    chain: list[dict[str, Any]] = []
    exc: BaseException | None = found[1]
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen and len(chain) < 5:
        seen.add(id(exc))
        frames = []
        tb = exc.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            frames.append(f"{code.co_filename}:{tb.tb_lineno} in {code.co_name}")
            tb = tb.tb_next
        chain.append({"type": f"{type(exc).__module__}.{type(exc).__qualname__}",
                      "frames": frames[-20:]})
        exc = exc.__cause__ or exc.__context__
    event_dict["exception_chain"] = chain
    return event_dict


def _shared_processors() -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def logging_config(fmt: str = "json", level: str = "INFO") -> dict[str, Any]:
    """The `LOGGING` dictConfig of every process (settings, gunicorn.conf.py, Celery's
    `setup_logging`), and structlog's own configuration for structlog-native loggers."""
    if fmt not in ("json", "console"):
        raise ValueError(f"LOG_FORMAT is json or console, not {fmt!r}")
    renderer: Any = (structlog.processors.JSONRenderer(sort_keys=True) if fmt == "json"
                     else structlog.dev.ConsoleRenderer(colors=False))
    logging.captureWarnings(True)  # warnings too are log lines (logger `py.warnings`)
    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, *_shared_processors(),
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    # Loggers that come with handlers of their own (Django's defaults, gunicorn's) are named so
    # that theirs are replaced: every record reaches the one handler below.
    own = {"handlers": ["default"], "level": level, "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "structured": {
                "()": structlog.stdlib.ProcessorFormatter,
                "foreign_pre_chain": _shared_processors(),
                "processors": [
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    exception_without_message,
                    redact,
                    renderer,
                ],
            },
        },
        "handlers": {
            "default": {"class": "logging.StreamHandler", "formatter": "structured",
                        "stream": "ext://sys.stderr"},
        },
        "root": {"handlers": ["default"], "level": level},
        "loggers": {
            "django": {"handlers": [], "level": level, "propagate": True},
            "django.server": {"handlers": [], "level": level, "propagate": True},
            "gunicorn.error": own,
            # Its access lines carry query strings; config.middleware logs each request
            # without one.
            "gunicorn.access": {**own, "level": "WARNING"},
            "uvicorn": own,
            "uvicorn.error": {"handlers": [], "level": level, "propagate": True},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": True},
        },
    }


def apply(config: Mapping[str, Any], level: int | str | None = None) -> None:
    """Configure this process's logging from `config` (Celery's `setup_logging` receiver: the
    worker's `--loglevel` raises or lowers the root level)."""
    logging.config.dictConfig(dict(config))
    if level is not None:
        logging.getLogger().setLevel(level)
