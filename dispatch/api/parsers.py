"""The request body parser (docs/design.md#denials): strict UTF-8 JSON, at most 1 MiB.

Built on `protocols.canonical.parse_json`, so duplicate keys, `NaN`/`Infinity`, lone surrogates,
invalid UTF-8 and nesting deeper than `MAX_DEPTH` are `malformed_request`, never a 500. Bodies
over `DATA_UPLOAD_MAX_MEMORY_SIZE` are `request_too_large`; other media types are refused by DRF
as 415 `unsupported_media_type`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework.parsers import BaseParser

from protocols.canonical import CanonicalizationError, parse_json
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONValue

UTF8 = {"utf-8", "utf8"}


def body_limit() -> int:
    return int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)


def check_declared_length(meta: Mapping[str, Any]) -> None:
    """Refuse a body whose declared length is over the limit, before reading any of it."""
    raw = meta.get("CONTENT_LENGTH") or "0"
    try:
        length = int(raw)
    except (TypeError, ValueError):
        raise Denial(DenialCode.MALFORMED_REQUEST, "The Content-Length header is not a number.",
                     header="Content-Length") from None
    if length > body_limit():
        raise Denial(DenialCode.REQUEST_TOO_LARGE, limit=body_limit(), length=length)


class StrictJSONParser(BaseParser):
    media_type = "application/json"

    def parse(
        self, stream: IO[bytes], media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> JSONValue:
        charset = _charset(media_type or "")
        if charset is not None and charset.lower() not in UTF8:
            raise Denial(DenialCode.UNSUPPORTED_MEDIA_TYPE, "JSON bodies are UTF-8 only.",
                         charset=charset)
        limit = body_limit()
        # Read one byte past the limit, so a body without a trustworthy length is still bounded.
        data = stream.read(limit + 1)
        if len(data) > limit:
            raise Denial(DenialCode.REQUEST_TOO_LARGE, limit=limit)
        try:
            return parse_json(data)
        except CanonicalizationError as exc:
            raise Denial(DenialCode.MALFORMED_REQUEST, pointer=exc.pointer,
                         reason=exc.reason) from None


def _charset(media_type: str) -> str | None:
    for param in media_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"')
    return None
