"""What kind of process this is, from its command line: the `application_name` of its
PostgreSQL connections (`pg_stat_activity` says which process holds each, docs/deployment.md),
unless `DATABASE_APPLICATION_NAME` names it.

Read from `sys.argv` as the settings load, before anything runs: gunicorn is the web, Celery's
`worker` and `beat` are themselves, and `manage.py COMMAND` is its command (`mcp_serve` is the
MCP gateway). A prefork child keeps its parent's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath

PREFIX = "console-"
#: Servers of the web app (WSGI and ASGI).
WEB_SERVERS = frozenset({"gunicorn", "uvicorn", "daphne"})
#: Commands known by a shorter name.
COMMAND_NAMES = {"mcp_serve": "mcp", "run_destinations": "destinations"}


def _program(argv: Sequence[str]) -> str:
    """The program's name; for `python -m PACKAGE`, the package's."""
    path = PurePath(argv[0]) if argv else PurePath()
    if path.name == "__main__.py":
        return path.parent.name
    return path.name


def process_kind(argv: Sequence[str]) -> str:
    """`console-web`, `console-worker`, `console-beat`, `console-reconcile`, `console-mcp`, …"""
    program = _program(argv)
    words = [word for word in argv[1:] if not word.startswith("-")]
    if program in WEB_SERVERS:
        return PREFIX + "web"
    if program == "celery":
        kind = next((word for word in words if word in ("worker", "beat")), "celery")
        return PREFIX + kind
    if program == "manage.py" and words:
        return PREFIX + COMMAND_NAMES.get(words[0], words[0])
    if program in ("pytest", "py.test"):
        return PREFIX + "test"
    return PREFIX.rstrip("-")
