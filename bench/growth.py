"""Bench 4: claim latency and the console queue page as the tables grow.

The tables are filled in steps (10^4, 10^5, and 10^6 on PostgreSQL only, never with --quick)
with, per unit: one pending `payments.transfer` approval (proposal + approval request) of the
operator's own tenant, one completed `crm.lookup` operation (proposal + operation) and one audit
event. Rows are cloned from service-made specimens and bulk-inserted (`COPY` / `executemany`),
then `ANALYZE` runs, as autovacuum would. At each size, alternately:

- claim: `proposal_dispatch(enqueue=False)` of a fresh approved email (the whole steps 1-7);
- page: `GET /console/` with the Django test client logged in as an operator (or, while the
  console is not there yet, its selectors);
- reference: `GET /accounts/login/`, which touches no table, so that the machine's drift
  between sizes can be told apart from the tables' growth.

Target: at the largest size, within 1.2x of the smallest. Judged on each figure divided by the
reference measured beside it; the raw medians are shown too.
"""

from __future__ import annotations

import re
import time
from datetime import timedelta
from typing import Any

from bench.common import (
    DEBUG_OFF,
    Context,
    Result,
    Table,
    Target,
    django_env,
    in_child,
    median,
    ms,
    percentile,
)

NAME = "growth"
TITLE = "Growth: claim latency and the console queue at 10^4 .. 10^6 rows"
LIMIT = 1.2
GROWTH_ENV = {"ALLOWED_HOSTS": "testserver,localhost,127.0.0.1", **DEBUG_OFF,
              "SECURE_SSL_REDIRECT": "0"}  # the test client speaks plain HTTP


def plan(quick: bool) -> dict[str, Any]:
    if quick:
        return {"sizes": {"sqlite": [1_000, 5_000], "postgres": [1_000, 5_000]},
                "samples": 15, "quick": True}
    return {"sizes": {"sqlite": [10_000, 100_000, 1_000_000],
                      "postgres": [10_000, 100_000, 1_000_000]},
            "samples": 40, "quick": False}


def backends_for(quick: bool, available: list[str]) -> list[str]:
    if quick:
        return [b for b in ("postgres", "sqlite") if b in available][:1]
    return available


def steps(quick: bool, backends: list[str]) -> int:
    p = plan(quick)
    return sum(2 * len(p["sizes"][b]) + 1 for b in backends_for(quick, backends))


# --- filling ------------------------------------------------------------------------------------


def _fill(world: Any, specimens: dict[str, Any], have: int, want: int) -> None:
    """Add units `have .. want-1`: a pending approval, a completed operation, an audit event."""
    from bench.fixtures import insert_rows
    from dispatch.models import ApprovalRequest, AuditEvent, Operation, Proposal

    transfer, approval, lookup, operation = (specimens[k] for k in
                                             ("transfer", "approval", "lookup", "operation"))
    start = specimens["now"] - timedelta(minutes=50)
    span = 50 * 60 * 1_000_000 // max(want, 1)  # creation times spread over 50 minutes

    def at(n: int) -> Any:
        return start + timedelta(microseconds=span * n)

    batch = 20_000
    for offset in range(have, want, batch):
        numbers = range(offset, min(offset + batch, want))
        insert_rows(Proposal, ({**transfer, "id": f"prp_g{n}", "execution_id": f"exe_g{n}",
                                "created_at": at(n)} for n in numbers))
        insert_rows(ApprovalRequest, ({**approval, "id": f"apr_g{n}", "proposal_id": f"prp_g{n}",
                                       "created_at": at(n),
                                       "expires_at": at(n) + timedelta(hours=2)}
                                      for n in numbers))
        insert_rows(Proposal, ({**lookup, "id": f"prp_h{n}", "execution_id": f"exe_h{n}",
                                "created_at": at(n)} for n in numbers))
        insert_rows(Operation, ({**operation, "id": f"op_h{n}", "proposal_id": f"prp_h{n}",
                                 "claimed_at": at(n), "updated_at": at(n)} for n in numbers))
        insert_rows(AuditEvent, ({"tenant_id": world.tenant_id, "at": at(n),
                                  "kind": "operation.completed", "actor": "dispatcher",
                                  "operation_id": f"op_h{n}", "proposal_id": f"prp_h{n}",
                                  "digest": "", "details": {"attempt": 1, "error": ""}}
                                 for n in numbers))


def _specimens(world: Any, now: Any) -> dict[str, Any]:
    from django.utils import timezone

    from bench.fixtures import _row
    from dispatch.models import ApprovalRequest, Operation, Principal
    from dispatch.services.dispatcher import proposal_dispatch
    from dispatch.services.proposals import proposal_create
    from dispatch.services.worker import operation_execute

    owner = Principal.objects.get(id=world.owner_id)
    transfer = proposal_create(principal=owner, operation="payments.transfer", arguments={
        "from_account": "acct-001", "to_account": "acct-999", "amount": "10.00",
        "currency": "EUR", "memo": "growth"}, now=now)
    lookup = proposal_create(principal=owner, operation="crm.lookup",
                             arguments={"customer_id": "cus-001"}, now=now)
    done = proposal_dispatch(principal=owner, proposal_id=lookup.id, now=timezone.now(),
                             enqueue=False)
    operation_execute(operation_id=done.id)
    return {"now": now, "transfer": _row(transfer),
            "approval": _row(ApprovalRequest.objects.get(proposal_id=transfer.id)),
            "lookup": _row(lookup), "operation": _row(Operation.objects.get(id=done.id))}


# --- measuring ----------------------------------------------------------------------------------


COUNT_RE = re.compile(r"COUNT\(", re.IGNORECASE)


def _page_probe(client: Any) -> tuple[str, Any]:
    """('page', None) if the console queue answers, else ('selectors', why)."""
    try:
        response = client.get("/console/")
    except Exception as exc:
        return "selectors", f"{type(exc).__name__}: {exc}"
    if response.status_code != 200:
        return "selectors", f"GET /console/ answered {response.status_code}"
    return "page", None


def drive(report: Any, backend: str, plan_: dict[str, Any]) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.utils import timezone

    from bench.fixtures import OPERATOR_PASSWORD, analyze, approved_emails, make_world
    from dispatch.models import Principal
    from dispatch.selectors.approvals import approval_count_pending, approval_list_pending
    from dispatch.services.dispatcher import proposal_dispatch

    now = timezone.now()
    world = make_world(now)
    owner = Principal.objects.get(id=world.owner_id)
    operator = Principal.objects.get(id=world.operator_id)
    specimens = _specimens(world, now)
    client = Client()
    if not client.login(username=world.operator_name, password=OPERATOR_PASSWORD):
        client.force_login(get_user_model().objects.get(username=world.operator_name))
    mode, why = _page_probe(client)

    def page() -> int:
        if mode == "page":
            response = client.get("/console/")
            if response.status_code != 200:
                raise RuntimeError(f"GET /console/ answered {response.status_code}")
            return len(response.content)
        found = approval_list_pending(viewer=operator)
        approval_count_pending(viewer=operator)
        return len(found.rows)

    def reference() -> None:
        response = client.get("/accounts/login/")
        if response.status_code not in (200, 302):
            raise RuntimeError(f"GET /accounts/login/ answered {response.status_code}")

    sizes = plan_["sizes"][backend]
    have = 0
    steps_out: list[dict[str, Any]] = []
    for size in sizes:
        t0 = time.monotonic()
        _fill(world, specimens, have, size)
        have = size
        analyze()
        fill_seconds = time.monotonic() - t0
        report(1, f"{backend}: {size:,} rows each")
        items = approved_emails(world, plan_["samples"] + 3, timezone.now())
        statements: list[str] = []

        def collect(execute: Any, sql: str, params: Any, many: bool, context: Any,
                    found: list[str] = statements) -> Any:
            found.append(sql)
            return execute(sql, params, many, context)

        # An execute wrapper, not CaptureQueriesContext: a request resets the queries log.
        with connection.execute_wrapper(collect):
            page()
        counts = [sql for sql in statements if COUNT_RE.search(sql)]
        unbounded = [sql for sql in counts if "LIMIT" not in sql.upper()]
        claim, render, ref = [], [], []
        for i, item in enumerate(items):
            t = time.perf_counter()
            proposal_dispatch(principal=owner, proposal_id=item.proposal_id,
                              now=timezone.now(), enqueue=False)
            c = time.perf_counter() - t
            t = time.perf_counter()
            page()
            r = time.perf_counter() - t
            t = time.perf_counter()
            reference()
            f = time.perf_counter() - t
            if i >= 3:  # warm-up
                claim.append(c)
                render.append(r)
                ref.append(f)
        steps_out.append({
            "size": size, "fill_seconds": fill_seconds, "claim": claim, "page": render,
            "reference": ref, "page_queries": len(statements),
            "count_queries": len(counts), "unbounded_counts": unbounded[:3],
        })
        report(1, f"{backend}: {size:,} measured")
    return {"mode": mode, "why": why, "steps": steps_out}


def run(ctx: Context) -> Result:
    p = plan(ctx.quick)
    result = Result(NAME)
    table = Table("Median latency at each size (ms); /ref = divided by the login-page "
                  "reference measured beside it",
                  ["backend", "rows", "fill s", "claim p50", "claim p90", "page p50",
                   "page p90", "ref p50", "claim/ref", "page/ref", "page queries",
                   "unbounded COUNTs"])
    figures: dict[str, Any] = {}
    for backend in backends_for(ctx.quick, ctx.dbs.backends()):
        url = ctx.dbs.url(backend, "growth")
        try:
            data = in_child(django_env(url, ctx.dbs.var, **GROWTH_ENV), drive, backend, p,
                            progress=ctx.progress, timeout=3600)
        finally:
            ctx.dbs.drop(url)
            ctx.progress.step(1)
        figures[backend] = data
        if data["mode"] != "page":
            result.notes.append(f"{backend}: the console queue page is not there yet "
                                f"({data['why']}); timed its selectors instead")
        what = "page" if data["mode"] == "page" else "selectors"
        for s in data["steps"]:
            ref = median(s["reference"])
            table.rows.append([
                backend, f"{s['size']:,}", f"{s['fill_seconds']:.0f}",
                ms(median(s["claim"])), ms(percentile(s["claim"], 90)),
                ms(median(s["page"])), ms(percentile(s["page"], 90)), ms(ref),
                f"{median(s['claim']) / ref:.2f}", f"{median(s['page']) / ref:.2f}",
                s["page_queries"], len(s["unbounded_counts"])])
            if s["unbounded_counts"]:
                result.notes.append(f"{backend} {s['size']:,}: unbounded COUNT on the page: "
                                    f"{s['unbounded_counts'][0][:200]}")
        first, last = data["steps"][0], data["steps"][-1]
        for key, label in (("claim", "claim latency"), ("page", f"console queue {what}")):
            norm = [median(s[key]) / median(s["reference"]) for s in (first, last)]
            raw = [median(s[key]) for s in (first, last)]
            result.targets.append(Target(
                f"{backend}: {label} at {last['size']:,} vs {first['size']:,}",
                norm[1] / norm[0], LIMIT, at_least=False, unit="x",
                detail=f"raw medians {ms(raw[1])} vs {ms(raw[0])} ms = {raw[1] / raw[0]:.2f}x"))
        result.targets.append(Target(f"{backend}: unbounded COUNTs on the queue page",
                                     sum(len(s["unbounded_counts"]) for s in data["steps"]),
                                     0, at_least=False))
    if ctx.dbs.pg_missing:
        result.notes.append(f"PostgreSQL skipped: {ctx.dbs.pg_missing}")
    table.note = (f"{p['samples']} interleaved samples per size. Per unit: a pending approval, "
                  "a completed operation, an audit event (so 2 proposals).")
    result.tables.append(table)
    result.figures = figures
    return result
