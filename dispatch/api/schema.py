"""OpenAPI documentation helpers: security schemes and the error responses of every call.

Every endpoint documents each status it can answer with, the error body of that status
(`ErrorNNN`, its `code` an enum of that status's codes) and, in the description, the codes this
particular call can give (LIBRARIES.md: undocumented 4xx make schemathesis fail everything).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.conf import settings
from drf_spectacular.extensions import (
    OpenApiAuthenticationExtension,
    OpenApiSerializerFieldExtension,
)
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse

from dispatch.api.fields import StrictInputSerializer
from dispatch.api.serializers import error_serializer
from dispatch.runtime import get_runtime
from protocols.denials import DenialCode
from protocols.jsontypes import JSONObject

C = DenialCode

#: Every authenticated call: no or a bad token, throttled, database unavailable.
ALWAYS = (C.UNAUTHENTICATED, C.BUDGET_EXHAUSTED, C.PERSISTENCE_FAILURE)
#: Every call with a JSON body.
BODY = (C.MALFORMED_REQUEST, C.REQUEST_TOO_LARGE, C.UNSUPPORTED_MEDIA_TYPE, C.SCHEMA_INVALID)

_NOTES = {
    C.UNAUTHENTICATED: "no live bearer token or session (or a session without its CSRF token)",
    C.BUDGET_EXHAUSTED: "a tool-call budget is used up, or the principal's request rate "
                        "(`details.reason` = \"rate limit\", see `Retry-After`)",
    C.PERSISTENCE_FAILURE: "the database could not be reached; nothing was written",
    C.MALFORMED_REQUEST: "the body is empty or not strict UTF-8 JSON (duplicate keys, NaN, "
                         "lone surrogates, nesting deeper than 128), or a query parameter is "
                         "invalid",
    C.SCHEMA_INVALID: "see `details.errors`: `{pointer, message}` from the body's root, at "
                      "most 50, and `details.error_count`, how many there were",
}


def error_responses(*codes: DenialCode, body: bool = False) -> dict[int, OpenApiResponse]:
    """The documented error responses of one call: its own codes plus the common ones."""
    by_status: dict[int, list[DenialCode]] = defaultdict(list)
    for code in dict.fromkeys([*codes, *(BODY if body else ()), *ALWAYS]):
        by_status[code.status].append(code)
    return {
        status: OpenApiResponse(
            response=error_serializer(status),
            description="Codes: " + "; ".join(
                f"`{code.value}`" + (f" ({_NOTES[code]})" if code in _NOTES else "")
                for code in found),
        )
        for status, found in sorted(by_status.items())
    }


def path_id(name: str, kind: str) -> OpenApiParameter:
    return OpenApiParameter(
        name, str, OpenApiParameter.PATH,
        description=f"The {kind}'s id. Ids of other tenants answer `not_found` like forged ones.")


def query(name: str, description: str, schema: JSONObject) -> OpenApiParameter:
    return OpenApiParameter(name, schema, OpenApiParameter.QUERY, required=False,
                            description=description)


def page_parameters() -> list[OpenApiParameter]:
    return [
        query("cursor", "An opaque cursor from a `next` or `previous` link; one that was not "
                        "handed out is `malformed_request`.", {"type": "string"}),
        query("page_size", "Results per page (default 50).",
              {"type": "integer", "minimum": 1, "maximum": 200}),
    ]


class BearerScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]  # its __init_subclass__ is unannotated
    target_class = "dispatch.api.authentication.BearerAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> JSONObject:
        return {"type": "http", "scheme": "bearer",
                "description": "An agent's token (`create_agent`) or a human's personal token."}


class PrincipalSessionScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]  # its __init_subclass__ is unannotated
    target_class = "dispatch.api.authentication.PrincipalSessionAuthentication"
    name = "sessionAuth"

    def get_security_definition(self, auto_schema: Any) -> JSONObject:
        return {"type": "apiKey", "in": "cookie", "name": settings.SESSION_COOKIE_NAME,
                "description": "A human's console session; unsafe methods need the "
                               "`X-CSRFToken` header."}


class ResourceStateScheme(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]  # its __init_subclass__ is unannotated
    """A resource's state is one of its kind's: the enum is every registered kind's states
    (the demo's `sent` or `published` only where the demo is installed)."""

    target_class = "dispatch.api.serializers.ResourceStateField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> JSONObject:
        states = {str(state) for kind in get_runtime().resource_kinds.values()
                  for state in kind.protocol.states}
        return {"type": "string", "enum": sorted(states)}


class ApiAutoSchema(AutoSchema):
    """Names nested serializers after their view: `ProposalCreateApi.InputSerializer` is the
    component `ProposalCreateInput`, so every view may call its own `InputSerializer`."""

    def get_serializer_name(self, serializer: Any, direction: str) -> str:
        parts = type(serializer).__qualname__.split(".")
        return "".join(p.removesuffix("Api").removesuffix("Serializer") for p in parts)

    def _get_request_body(self, direction: str = "request") -> Any:
        body = super()._get_request_body(  # type: ignore[no-untyped-call]  # unannotated upstream
            direction)
        if body is not None:
            body["required"] = True  # even `{}`: an empty body is `malformed_request`
        return body

    def _map_basic_serializer(self, serializer: Any, direction: str) -> JSONObject:
        mapped: JSONObject = super()._map_basic_serializer(  # type: ignore[no-untyped-call]  # unannotated upstream
            serializer, direction)
        if isinstance(serializer, StrictInputSerializer):
            mapped.pop("description", None)
            mapped["additionalProperties"] = False  # unknown members are refused
        return mapped
