"""The agents' REST API (docs/rest-api.md#calls): what every view shares.

Views are thin: a nested `InputSerializer` checks the body's shape and JSON types, the service
decides everything else and raises `Denial`s that `dispatch.api.exceptions` renders unchanged.
`now` is taken in the view, once per request, and passed down. One module per job:
`intake` (contracts, resources, proposals and their dispatch), `decisions` (approvals,
operations, renewals and cancellation), `approvals` (the approvals list), `records` (grants and
the audit), `admin` (agents, their tokens, and pauses)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.http import HttpRequest
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dispatch.api.parsers import check_declared_length
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject

C = DenialCode
#: What an id can look like (`prefix_` and URL-safe letters); anything else cannot exist.
ID_SHAPE = re.compile(r"[A-Za-z0-9_]{1,40}")
#: Upper bounds of request strings, beyond which no value can be valid.
NAME_MAX = 150
DIGEST_MAX = 100
TEXT_MAX = 10_000


class JsonOnlyNegotiation(DefaultContentNegotiation):
    """Always answer JSON, whatever `Accept` says: errors included, never a 406."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer],
        format_suffix: str | None = None,
    ) -> tuple[BaseRenderer, str]:
        first = next(iter(renderers))
        return first, first.media_type


class ApiView(APIView):
    content_negotiation_class = JsonOnlyNegotiation
    # OPTIONS is not part of the API (no metadata): it is neither served nor advertised.
    http_method_names = ("get", "post", "put", "patch", "delete", "head", "trace")

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # Every body, whatever its type or the view, is refused over 1 MiB before it is read.
        check_declared_length(request.META)
        super().initial(request, *args, **kwargs)


def checked_id(value: str, kind: str) -> str:
    """A path id; one that cannot exist answers exactly like another tenant's (`not_found`)."""
    if not ID_SHAPE.fullmatch(value):
        raise Denial(C.NOT_FOUND, kind=kind, id=value)
    return value


def require_future(value: datetime | None, now: datetime, pointer: str) -> None:
    """`schema_invalid` at `pointer` for an expiry that is not after `now`."""
    if value is not None and value <= now:
        raise Denial(C.SCHEMA_INVALID, errors=[
            {"pointer": pointer, "message": "must be in the future"}])


def validated(
    serializer_class: type[serializers.Serializer[JSONObject]],
    request: Request,
) -> JSONObject:
    """The body, checked by the view's `InputSerializer`; shape errors are `schema_invalid`."""
    if request.stream is None:
        # DRF reads no stream when there is no body (a zero or absent Content-Length) and
        # hands the view `{}`; an empty body is not an empty object (docs/design.md#denials).
        raise Denial(C.MALFORMED_REQUEST, reason="the body is empty")
    if not isinstance(request.data, dict):
        raise Denial(C.SCHEMA_INVALID, errors=[
            {"pointer": "", "message": "the body must be a JSON object"}])
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    data: JSONObject = serializer.validated_data
    return data


# --- anything else under /api/v1/ -------------------------------------------------------------


@extend_schema(exclude=True)
class NotFoundApi(ApiView):
    """Unknown paths answer the JSON `not_found` body, for every method."""

    def http_method_not_allowed(
        self, request: HttpRequest, *args: Any, **kwargs: Any,
    ) -> Response:
        raise Denial(C.NOT_FOUND)
