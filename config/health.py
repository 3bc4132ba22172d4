"""Probes and the scrape (docs/design.md#running): `GET /healthz`, `GET /readyz`, `GET /metrics`.

`OperationalMiddleware`, first in MIDDLEWARE, answers these three paths before host validation,
the HTTPS redirect, sessions, CSRF, CSP and the request log: probes and scrapers address a
process by its own address over plain HTTP, every few seconds, and must cost next to nothing.
Anything else goes on down the stack.

- `/healthz`: 200 while the process serves; it touches nothing.
- `/readyz`: 200 when the database answers, every migration is applied and the broker answers;
  else 503 with the failing checks named. The migrations are read once per process until they
  are all applied (then remembered: they are not unapplied under a running process).
- `/metrics`: the Prometheus text format (dispatch.observability.metrics). No tenant data; with
  `METRICS_TOKEN` set it answers only `Authorization: Bearer <METRICS_TOKEN>` (else 401).

django-health-check was not used: its database check writes rows into a table of its own, its
Celery check needs a result backend (this project ignores task results) and it has no migration
check of this shape; the three checks below are a few lines each.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Callable

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, HttpResponseBase

log = logging.getLogger(__name__)

Handler = Callable[[HttpRequest], HttpResponseBase]

_migrated = False


class NotReady(Exception):
    """A check's own finding, fit to be shown (it names nothing of the deployment)."""


def check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def check_migrations() -> None:
    """Raises unless every migration on disk is applied to the database."""
    global _migrated
    if _migrated:
        return
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        raise NotReady(f"{len(plan)} migrations not applied")
    _migrated = True


def check_broker() -> None:
    from dispatch.observability.broker import queue_depth

    queue_depth(timeout=2.0)


CHECKS: dict[str, Callable[[], None]] = {
    "database": check_database,
    "migrations": check_migrations,
    "broker": check_broker,
}


def _json(status: int, body: object) -> HttpResponse:
    response = HttpResponse(json.dumps(body), status=status, content_type="application/json")
    response["Cache-Control"] = "no-store"
    return response


def healthz(request: HttpRequest) -> HttpResponse:
    return _json(200, {"status": "ok"})


def readyz(request: HttpRequest) -> HttpResponse:
    checks: dict[str, str] = {}
    for name, check in CHECKS.items():
        if name == "migrations" and checks.get("database") != "ok":
            checks[name] = "not checked: no database"
            continue
        try:
            check()
        except Exception as exc:
            # The kind of failure only: an unauthenticated answer names no host, user or path.
            log.warning("readiness check %s failed", name, exc_info=exc)
            checks[name] = (str(exc) if isinstance(exc, NotReady)
                            else f"failed ({type(exc).__name__})")
        else:
            checks[name] = "ok"
    failing = [name for name, state in checks.items()
               if state != "ok" and not state.startswith("not checked")]
    if failing:
        return _json(503, {"status": "unavailable", "failing": failing, "checks": checks})
    return _json(200, {"status": "ok", "checks": checks})


def metrics(request: HttpRequest) -> HttpResponse:
    token: str = settings.METRICS_TOKEN
    if token:
        scheme, _, given = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(),
                                                                 token.encode()):
            response = HttpResponse("unauthorized\n", status=401, content_type="text/plain")
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
    from dispatch.observability.metrics import exposition

    body, content_type = exposition(request.META.get("HTTP_ACCEPT", ""))
    response = HttpResponse(body, content_type=content_type)
    response["Cache-Control"] = "no-store"
    return response


ROUTES: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/healthz": healthz,
    "/readyz": readyz,
    "/metrics": metrics,
}


class OperationalMiddleware:
    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        view = ROUTES.get(request.path_info.rstrip("/") or "/")
        if view is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response = HttpResponse(status=405)
            response["Allow"] = "GET, HEAD"
            return response
        answer = view(request)
        if request.method == "HEAD":
            answer.content = b""
        return answer
