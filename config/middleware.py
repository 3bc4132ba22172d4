"""The request's log context (docs/design.md#running): a request id, then who is calling.

`RequestContextMiddleware` takes the caller's `X-Request-ID` when it is well formed (1 to 128
letters, digits, `.`, `_`, `:` or `-`), else makes one; it binds it to every line logged while
the request runs, echoes it in the response's `X-Request-ID`, and logs one `request` line (method,
path without the query string, status, duration). Who is calling is bound where it is found,
without a query of its own: by the API's authenticators (dispatch.api.authentication) and the
console's role check (console.roles).

`RequestMetricsMiddleware`, first in MIDDLEWARE, counts every answer, probes and scrapes
included, by the URL pattern that answered it (dispatch.observability.traffic).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from time import monotonic

import structlog
from django.http import HttpRequest, HttpResponseBase

from dispatch.observability import traffic
from dispatch.observability.context import bind_ids, clear_ids

REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
log = structlog.get_logger("console.request")

Handler = Callable[[HttpRequest], HttpResponseBase]


class RequestContextMiddleware:
    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        clear_ids()
        given = request.META.get("HTTP_X_REQUEST_ID", "")
        request_id = given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        bind_ids(request_id=request_id)
        started = monotonic()
        response = self.get_response(request)
        response["X-Request-ID"] = request_id
        log.info("request", method=request.method, path=request.path,
                 status=response.status_code,
                 duration_ms=round((monotonic() - started) * 1000, 1))
        # The ids stay bound until the next request clears them: Django logs a 4xx or 5xx
        # answer (`django.request`) after the last middleware has returned.
        return response



#: The paths config.health answers before any URL pattern, counted under their own name.
PROBES = {"/healthz": "healthz", "/readyz": "readyz", "/metrics": "metrics"}


class RequestMetricsMiddleware:
    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        started = monotonic()
        response = self.get_response(request)
        traffic.request_answered(route=route_of(request), method=request.method or "",
                                 status=response.status_code, seconds=monotonic() - started)
        return response


def route_of(request: HttpRequest) -> str:
    """The URL pattern of the view that answered (never the path requested: ids stay out of
    the labels), a probe's name, or `unmatched`."""
    match = getattr(request, "resolver_match", None)
    if match is not None and match.route:
        return str(match.route)
    return PROBES.get(request.path_info.rstrip("/"), traffic.UNMATCHED)
