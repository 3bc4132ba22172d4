"""The cost of the permit token (docs/permit-tokens.md) on the claims bench (bench/claims.py).

The `claims` bench runs a third side, `signed`: the same `proposal_dispatch(enqueue=False)` and
then the one call the worker makes as the attempt starts, `permit_token(operation, contract)`,
in rounds alternating with the unsigned `service` side and the raw one. This module makes that
call, measures one mint alone (its median time, and the statements it runs: none), and builds
the table that compares the two sides.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import Table, Target, fmt, median

__all__ = ["mint_figures", "sign", "signing_table"]


def sign(operation: Any) -> str:
    """What the worker adds to an attempt: one token, one Ed25519 signature, no statement."""
    from dispatch.runtime import get_runtime
    from dispatch.services.permit_tokens import permit_token

    return permit_token(operation, get_runtime().contract(operation.operation))


def mint_figures(world: Any, count: int = 500) -> dict[str, Any]:
    """One mint alone, `count` times, for a claimed `email.send`: the median microseconds, and
    the SQL statements run."""
    from django.db import connection
    from django.utils import timezone

    from bench.fixtures import approved_emails
    from dispatch.models import Principal
    from dispatch.services.dispatcher import proposal_dispatch

    (item,) = approved_emails(world, 1, timezone.now())
    operation = proposal_dispatch(principal=Principal.objects.get(id=world.owner_id),
                                  proposal_id=item.proposal_id, now=timezone.now(), enqueue=False)
    statements = [0]

    def counted(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements[0] += 1
        return execute(sql, params, many, context)

    sign(operation)  # warm: the runtime, the key
    times = []
    with connection.execute_wrapper(counted):
        for _ in range(count):
            t0 = time.perf_counter()
            sign(operation)
            times.append(time.perf_counter() - t0)
    return {"mint_us": median(times) * 1e6, "mint_statements": statements[0]}


def signing_table(per_backend: dict[str, Any], levels: list[int]) -> tuple[Table, list[Target]]:
    """Claims per second without and with the token, paired by round; and its targets."""
    table = Table("Signing cost: claim + dispatch without and with the permit token (same run, "
                  "rounds alternating)",
                  ["backend", "procs", "unsigned claims/s", "signed claims/s", "ratio",
                   "mint µs (alone)", "mint statements"])
    targets: list[Target] = []
    for backend, data in per_backend.items():
        budget = data["budget"]
        for level in levels:
            mine = [r for r in data["rounds"] if r["level"] == level]
            plain = sorted((r for r in mine if r["mode"] == "service"), key=lambda r: r["rep"])
            signed = sorted((r for r in mine if r["mode"] == "signed"), key=lambda r: r["rep"])
            ratios = [s["claims_per_s"] / p["claims_per_s"]
                      for s, p in zip(signed, plain, strict=True) if p["claims_per_s"] > 0]
            table.rows.append([
                backend, level, fmt(median([r["claims_per_s"] for r in plain]), 0),
                fmt(median([r["claims_per_s"] for r in signed]), 0), f"{median(ratios):.0%}",
                fmt(budget["mint_us"], 0), budget["mint_statements"]])
        targets.append(Target(f"{backend}: statements of a permit token mint",
                              budget["mint_statements"], 0, at_least=False))
    table.note = ("signed = the same dispatch, then the worker's one call at attempt start, "
                  "`permit_token(operation, contract)`; ratio = median of signed/unsigned over "
                  "the paired rounds.")
    return table, targets
