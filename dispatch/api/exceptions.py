"""Every API refusal as `{"error": {"code", "message", "details"}}` (docs/design.md#denials).

A `Denial` from a service keeps its own code, status, message and details. DRF's and Django's
own errors are mapped onto the same codes; a serializer's validation errors become
`schema_invalid` with `details.errors` as `{"pointer", "message"}` from the body's root (at
most 50, and `details.error_count` says how many there were: see `protocols.denials.Denial`).
Anything else is a bug and stays a 500, except an outage of the store or of the broker: a
database that cannot be reached, is locked, closed the connection or failed under the request,
or a broker that refused a message, is `persistence_failure` 503 (`_outage`), never
`internal_error`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404
from kombu.exceptions import OperationalError as BrokerError
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.settings import api_settings

from protocols.denials import MAX_ERRORS, Denial, DenialCode
from protocols.jsontypes import JSONObject, JSONValue

log = logging.getLogger(__name__)

WWW_AUTHENTICATE = 'Bearer realm="api"'
#: DRF's word for "the request's own fault" is 400; ours depends on what went wrong.
_STATUS_CODES = {
    400: DenialCode.MALFORMED_REQUEST,
    401: DenialCode.UNAUTHENTICATED,
    403: DenialCode.ROLE_REQUIRED,
    404: DenialCode.NOT_FOUND,
    413: DenialCode.REQUEST_TOO_LARGE,
    415: DenialCode.UNSUPPORTED_MEDIA_TYPE,
    429: DenialCode.BUDGET_EXHAUSTED,
}


def error_body(code: DenialCode | str, message: str, details: JSONObject) -> JSONObject:
    return {"error": {"code": str(code), "message": message, "details": details}}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's EXCEPTION_HANDLER: one body shape for every refusal."""
    if isinstance(exc, Denial):
        return _denial_response(exc)
    if isinstance(exc, exceptions.ValidationError):
        errors = sorted(validation_errors(exc.detail), key=lambda e: e["pointer"])
        return _denial_response(Denial(DenialCode.SCHEMA_INVALID, errors=errors))
    if isinstance(exc, exceptions.Throttled):
        seconds = exc.wait  # type: ignore[attr-defined]  # set by __init__; the stubs omit it
        wait = int(seconds) if seconds is not None else None
        response = _denial_response(Denial(
            DenialCode.BUDGET_EXHAUSTED,
            "Too many requests from this principal; wait and try again.",
            reason="rate limit", retry_after=wait))
        if wait is not None:
            response["Retry-After"] = str(wait)
        return response
    if isinstance(exc, exceptions.MethodNotAllowed):
        # docs/design.md#denials has no code of its own for this; the request itself is wrong.
        return Response(error_body(DenialCode.MALFORMED_REQUEST,
                                   f"{exc.detail} See the Allow header.",
                                   {"method": context["request"].method}), status=405)
    if isinstance(exc, exceptions.ParseError):
        return _denial_response(Denial(DenialCode.MALFORMED_REQUEST, reason=str(exc.detail)))
    if isinstance(exc, exceptions.UnsupportedMediaType):
        return _denial_response(Denial(DenialCode.UNSUPPORTED_MEDIA_TYPE,
                                       reason=str(exc.detail)))
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        return _denial_response(Denial(DenialCode.UNAUTHENTICATED))
    if isinstance(exc, Http404 | exceptions.NotFound):
        return _denial_response(Denial(DenialCode.NOT_FOUND))
    if isinstance(exc, RequestDataTooBig):
        return _denial_response(Denial(DenialCode.REQUEST_TOO_LARGE))
    if isinstance(exc, DjangoPermissionDenied | exceptions.PermissionDenied):
        return _denial_response(Denial(DenialCode.ROLE_REQUIRED))
    if _outage(exc):
        log.warning("store or broker unavailable: %s", type(exc).__name__)
        return _denial_response(Denial(DenialCode.PERSISTENCE_FAILURE))
    if isinstance(exc, exceptions.APIException):
        code = _STATUS_CODES.get(exc.status_code, DenialCode.MALFORMED_REQUEST)
        return Response(error_body(code, str(exc.detail), {}), status=exc.status_code)
    return None


def _outage(exc: Exception) -> bool:
    """The store or the broker failed, not the request and not the code: the database could
    not be reached, was locked or closed the connection (`OperationalError`,
    `InterfaceError`), its driver failed with no finer class (`DatabaseError` itself: a
    constraint, data or SQL error is a bug, a 500), or the broker refused a message (kombu's
    `OperationalError`, which wraps Redis's connection errors)."""
    return isinstance(exc, OperationalError | InterfaceError | BrokerError) \
        or type(exc) is DatabaseError


#: No error body is larger than this, whatever the request held (at most 1 MiB): a denial's
#: texts are already cut (`protocols.denials.shorten`); a long list it echoes (the values a
#: delegation widens by, say) is cut here to its first `MAX_ERRORS`, and `details.truncated`
#: says so.
MAX_ERROR_BODY = 64 * 1024


def _denial_response(denial: Denial) -> Response:
    body = denial.as_body()
    if len(_RENDERER.render(body)) > MAX_ERROR_BODY:
        details = {**_first_items(denial.details), "truncated": True}
        body = error_body(denial.code, denial.message, details)
        if len(_RENDERER.render(body)) > MAX_ERROR_BODY:
            body = error_body(denial.code, denial.message, {"truncated": True})
    response = Response(body, status=denial.status)
    if denial.code is DenialCode.UNAUTHENTICATED:
        response["WWW-Authenticate"] = WWW_AUTHENTICATE
    return response


_RENDERER = JSONRenderer()


def _first_items(value: JSONValue) -> JSONValue:
    if isinstance(value, dict):
        return {k: _first_items(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_first_items(v) for v in value[:MAX_ERRORS]]
    return value


def validation_errors(detail: JSONValue, base: str = "") -> Iterator[dict[str, str]]:
    """Flatten DRF's nested error detail into `{"pointer","message"}` (RFC 6901 pointers)."""
    if isinstance(detail, dict):
        for key, sub in detail.items():
            if key == api_settings.NON_FIELD_ERRORS_KEY:
                yield from validation_errors(sub, base)
            else:
                yield from validation_errors(sub, base + pointer_of(str(key)))
    elif isinstance(detail, list):
        for index, sub in enumerate(detail):
            if isinstance(sub, dict | list):
                # A list serializer's errors: one entry per element, empty when it was valid.
                yield from validation_errors(sub, f"{base}/{index}")
            else:
                yield {"pointer": base, "message": _message(sub)}
    else:
        yield {"pointer": base, "message": _message(detail)}


def _message(detail: JSONValue) -> str:
    if getattr(detail, "code", None) == "required":
        return "is required"
    return str(detail)


def pointer_of(name: str) -> str:
    """The RFC 6901 pointer of a member of the body's root."""
    return "/" + name.replace("~", "~0").replace("/", "~1")
