"""Keyset paging and capped counts, shared by the selectors' lists.

A list is keyset-paged on an indexed ordering (a timestamp and a unique tiebreaker), never by
offset, and never counts a whole table: counts are capped (`count_capped`), so a queue of
100,000 pending rows costs the same as one of 100.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db.models import Q, QuerySet

T = TypeVar("T")

# Queue and list pages never count past this; the page says "1,000+".
COUNT_CAP = 1000


@dataclass(frozen=True)
class Page(Generic[T]):
    """One keyset page: `rows` in display order, and the cursors of its ends when more exist."""

    rows: list[T]
    older: tuple[Any, ...] | None = None  # cursor to pass as `after` for the next page
    newer: tuple[Any, ...] | None = None  # cursor to pass as `before` for the previous page


@dataclass(frozen=True)
class Count:
    value: int
    capped: bool


def count_capped(queryset: QuerySet[Any], cap: int = COUNT_CAP) -> Count:
    """COUNT(*) over at most `cap + 1` rows of an indexed query (a LIMITed subquery)."""
    found = queryset.order_by().values("pk")[: cap + 1].count()
    return Count(value=min(found, cap), capped=found > cap)


def keyset(
    queryset: QuerySet[Any], *, keys: tuple[str, str], after: Sequence[Any] | None,
    before: Sequence[Any] | None, limit: int,
) -> Page[Any]:
    """Newest-first keyset paging on the pair `keys` (a timestamp and a unique tiebreaker).

    `after` continues below a cursor (older rows), `before` above it (newer rows). The first
    conjunct of each bound is a plain range on the leading key, so the database can use it as
    an index condition; the OR only filters rows that share the cursor's timestamp.
    """
    first, second = keys
    if before is not None:
        at, tie = before
        rows = list(queryset.filter(**{f"{first}__gte": at}).filter(
            Q(**{f"{first}__gt": at}) | Q(**{f"{second}__gt": tie}),
        ).order_by(first, second)[: limit + 1])
        more_newer = len(rows) > limit
        rows = rows[:limit][::-1]
        return Page(rows=rows, older=cursor_of(rows[-1], keys) if rows else None,
                    newer=cursor_of(rows[0], keys) if rows and more_newer else None)
    if after is not None:
        at, tie = after
        queryset = queryset.filter(**{f"{first}__lte": at}).filter(
            Q(**{f"{first}__lt": at}) | Q(**{f"{second}__lt": tie}))
    rows = list(queryset.order_by(f"-{first}", f"-{second}")[: limit + 1])
    more_older = len(rows) > limit
    rows = rows[:limit]
    return Page(rows=rows, older=cursor_of(rows[-1], keys) if more_older else None,
                newer=cursor_of(rows[0], keys) if rows and after is not None else None)


def cursor_of(row: Any, keys: tuple[str, str]) -> tuple[Any, ...]:
    """The cursor of `row` on the pair `keys`, as a page's `older` and `newer` hold it."""
    return tuple(getattr(row, key) for key in keys)
