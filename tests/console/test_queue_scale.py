"""The queue stays fast with 100,000 pending approvals: indexed keyset pages, capped counts."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dispatch.models import ApprovalRequest, Proposal
from tests.conftest import World
from tests.console.conftest import Browser, text

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

ROWS = 100_000
STEP_MS = 30


def _moment(start: datetime, offset: str) -> str:
    """SQL for `start + n * 30 ms + offset seconds`, stored as each backend stores datetimes."""
    if connection.vendor == "postgresql":
        return (f"(TIMESTAMPTZ '{start.isoformat()}' + n * INTERVAL '{STEP_MS} milliseconds'"
                f" + INTERVAL '{offset} seconds')")
    # SQLite: naive UTC text, with a fraction only when it is not zero (as Django writes it).
    epoch = int(start.timestamp())
    return (f"strftime('%Y-%m-%d %H:%M:%S', {epoch} + {offset} + (n * {STEP_MS}) / 1000,"
            f" 'unixepoch') || CASE WHEN (n * {STEP_MS}) % 1000 = 0 THEN '' ELSE"
            f" printf('.%06d', ((n * {STEP_MS}) % 1000) * 1000) END")


def _copy_rows(model: Any, template_id: str, rows: int, varying: dict[str, str]) -> None:
    """Insert `rows` copies of one row, generated inside the database (no Python loop)."""
    fields = model._meta.concrete_fields
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    columns = ", ".join(quote(f.column) for f in fields)
    values = ", ".join(varying.get(f.column, f"t.{quote(f.column)}") for f in fields)
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH RECURSIVE seq(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM seq"
            f" WHERE n < {rows - 1}) INSERT INTO {table} ({columns}) SELECT {values}"
            f" FROM seq CROSS JOIN {table} t WHERE t.id = '{template_id}'")


def flood(world: World, rows: int) -> None:
    """`rows` pending approvals, 30 ms apart over the last 50 minutes, copied from one."""
    template = world.propose_transfer()
    start = world.now.replace(microsecond=0) - timedelta(minutes=50)
    created = _moment(start, "0")
    _copy_rows(Proposal, template.id, rows, {"id": "'prp_flood' || n", "created_at": created})
    _copy_rows(ApprovalRequest, template.approval.id, rows, {
        "id": "'apr_flood' || n", "proposal_id": "'prp_flood' || n", "created_at": created,
        "expires_at": _moment(start, "7200")})


def timed(browser: Browser, url: str, **extra: Any) -> tuple[Any, float, int]:
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        response = browser.get(url, **extra)
        elapsed = time.perf_counter() - started
    assert response.status_code == 200
    return response, elapsed, len(queries)


def test_queue_pages_fast_over_100k_pending(world: World, operator: Browser) -> None:
    flood(world, ROWS)
    first, elapsed, queries = timed(operator, "/console/")
    body = text(first)
    assert "1,000+</strong> pending" in body
    assert body.count('class="row-link"') == 25
    assert queries <= 12, queries
    assert elapsed < 2.0, elapsed
    # Walk deep: every page costs the same, whatever its depth, and no row comes twice.
    url, seen = "/console/", []
    for _ in range(3):
        page = text(operator.get(url))
        seen += re.findall(r'id="q-(apr_\w+)"', page)
        found = re.search(r'href="([^"]+)" rel="next"', page)
        assert found
        url = found.group(1).replace("&amp;", "&")
    assert len(seen) == len(set(seen)) == 75
    assert seen[1:25] == [f"apr_flood{n}" for n in range(ROWS - 1, ROWS - 25, -1)]
    deep, elapsed, queries = timed(operator, url)
    assert text(deep).count('class="row-link"') == 25
    assert elapsed < 2.0, elapsed
    filtered, elapsed, _ = timed(operator, "/console/?operation=payments.transfer&age=1h")
    assert "matching the filters" in text(filtered)
    assert elapsed < 2.0, elapsed
    _, elapsed, _ = timed(operator, "/console/", headers={"HX-Request": "true"})
    assert elapsed < 2.0, elapsed
