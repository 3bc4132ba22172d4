"""Keyset (cursor) pagination, newest first unless a list says otherwise
(docs/rest-api.md#calls): no page counts a whole table, and an opaque cursor that was not handed
out is `malformed_request`, never a 500.
"""

from __future__ import annotations

from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import NotFound
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject

INVALID_CURSOR = "The cursor is not one this API handed out; start again from the first page."


class KeysetPagination(CursorPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def decode_cursor(self, request: Request) -> Cursor | None:
        try:
            cursor = super().decode_cursor(request)
        except NotFound:  # DRF's "Invalid cursor"
            raise Denial(DenialCode.MALFORMED_REQUEST, INVALID_CURSOR,
                         parameter=self.cursor_query_param) from None
        if cursor is not None and cursor.position is not None and not self.valid_position(
                cursor.position):  # type: ignore[arg-type]  # a str from the URL; stubs: int
            raise Denial(DenialCode.MALFORMED_REQUEST, INVALID_CURSOR,
                         parameter=self.cursor_query_param)
        return cursor

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        digits = raw.isascii() and raw.isdigit() and len(raw) <= len(str(self.max_page_size))
        if not (digits and 1 <= int(raw) <= self.max_page_size):
            raise Denial(DenialCode.MALFORMED_REQUEST,
                         f"page_size must be an integer from 1 to {self.max_page_size}.",
                         parameter=self.page_size_query_param)
        return int(raw)

    def valid_position(self, position: str) -> bool:
        raise NotImplementedError

    def as_page(self, data: list[JSONObject]) -> JSONObject:
        return {"results": data, "next": self.get_next_link(),
                "previous": self.get_previous_link()}


class AuditPagination(KeysetPagination):
    """Audit ids only grow: ordering by `-id` is newest first and unique."""

    ordering = "-id"

    def valid_position(self, position: str) -> bool:
        return position.isascii() and position.isdigit() and len(position) <= 19


class CheckpointPagination(KeysetPagination):
    """A tenant's checkpoints, one per block number: `-block` is latest first and unique."""

    ordering = "-block"

    def valid_position(self, position: str) -> bool:
        return position.isascii() and position.isdigit() and len(position) <= 19


class TimePagination(KeysetPagination):
    """Paged on a timestamp with the id as tiebreaker: a position is an aware ISO datetime."""

    def valid_position(self, position: str) -> bool:
        if len(position) > 40 or "\x00" in position:
            return False
        try:
            parsed = parse_datetime(position)
        except ValueError:
            return False
        return parsed is not None and parsed.tzinfo is not None


class GrantPagination(TimePagination):
    ordering = ("-created_at", "-id")


class ApprovalPagination(TimePagination):
    """Approvals oldest first, the one waiting longest on top (docs/rest-api.md#admin)."""

    ordering = ("created_at", "id")
