"""Bench 1: claim + dispatch through the service layer, beside the raw claim transaction.

Both sides run in the same harness against the same database: P worker processes (forked
from a driver that has made the data) take tickets from a shared counter; ticket t attempts
item t // 2, so every approved proposal is raced by two claimants and exactly one must win.

- `service`: `proposal_dispatch(enqueue=False)` — steps 1-7 of docs/design.md#write-transactions,
  the handler not run (its claim transaction also takes the budget: one more statement than the raw
  one).
- `signed`: the `service` side, then the worker's permit token (bench/signing.py).
- `raw`: the claim transaction alone with the driver itself (psycopg / sqlite3): conditional
  permit UPDATE ... WHERE state='issued', resource compare-and-swap UPDATE, operation INSERT,
  audit INSERT, COMMIT (`BEGIN IMMEDIATE` on SQLite).

Rounds of the three sides alternate, so that all see the same noise; the ratio of each pair
is taken, and the median of those ratios is compared with the target (>= 60 % of raw).
Afterwards the tables are checked: one operation, one claimed permit, one `permit.claimed`
event and one dispatching resource per won item, and no item won twice.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from bench.common import (
    Context,
    Result,
    Table,
    Target,
    django_env,
    fmt,
    in_child,
    median,
    ms,
    percentile,
)
from bench.signing import mint_figures, sign, signing_table

NAME = "claims"
MODES = ("service", "signed", "raw")  # one round of each per repeat, order rotating
TITLE = "Claim + dispatch: service layer vs raw claim transaction"
TARGET_RATIO = 0.60


def plan(quick: bool) -> dict[str, Any]:
    """Sizes; `BENCH_CLAIMS_ITEMS`, `BENCH_CLAIMS_REPEATS` and `BENCH_CLAIMS_LEVELS` (e.g.
    `1,4,16`) override them."""
    found = ({"levels": [1, 4, 16], "items": 16, "repeats": 1} if quick
             else {"levels": [1, 4, 16], "items": 200, "repeats": 3})
    if os.environ.get("BENCH_CLAIMS_ITEMS"):
        found["items"] = int(os.environ["BENCH_CLAIMS_ITEMS"])
    if os.environ.get("BENCH_CLAIMS_REPEATS"):
        found["repeats"] = int(os.environ["BENCH_CLAIMS_REPEATS"])
    if os.environ.get("BENCH_CLAIMS_LEVELS"):
        found["levels"] = [int(n) for n in os.environ["BENCH_CLAIMS_LEVELS"].split(",")]
    return found


def steps(quick: bool, backends: list[str]) -> int:
    p = plan(quick)
    return len(backends) * (2 + len(p["levels"]) * p["repeats"] * len(MODES))


# --- the raw claim transaction ------------------------------------------------------------------

RAW_PERMIT = ("UPDATE dispatch_permit SET state = 'claimed', claimed_at = {p} "
              "WHERE id = {p} AND proposal_id = {p} AND digest = {p} AND state = 'issued' "
              "AND expires_at > {p}")
RAW_RESOURCE = ("UPDATE dispatch_resource SET state = 'dispatching', updated_at = {p} "
                "WHERE id = {p} AND current_revision = {p} AND state = 'authorized'")
RAW_OPERATION = ("INSERT INTO dispatch_operation (id, tenant_id, proposal_id, permit_id, "
                 "principal_id, execution_id, operation, contract_fingerprint, state, "
                 "attempts_made, uncertain, next_attempt_at, result, evidence, lookup_found, "
                 "looked_up_at, claimed_at, updated_at) "
                 "VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, 'claimed', 0, FALSE, NULL, NULL, "
                 "'', '', NULL, {p}, {p})")
RAW_AUDIT = ("INSERT INTO dispatch_auditevent (tenant_id, at, kind, actor, operation_id, "
             "proposal_id, digest, details) VALUES ({p}, {p}, 'permit.claimed', {p}, {p}, {p}, "
             "{p}, {j})")


class RawClaimant:
    """The claim transaction with the database driver alone: what the database can do."""

    def __init__(self, url: str) -> None:
        self.sqlite = url.startswith("sqlite")
        if self.sqlite:
            import sqlite3

            # Autocommit mode, explicit BEGIN IMMEDIATE: the write lock from the first statement.
            self.conn: Any = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=30,
                                             isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            mark, jmark = "?", "?"
        else:
            import psycopg

            self.conn = psycopg.connect(url, autocommit=False)
            mark, jmark = "%s", "%s::jsonb"
        self.sql = [s.format(p=mark, j=jmark)
                    for s in (RAW_PERMIT, RAW_RESOURCE, RAW_OPERATION, RAW_AUDIT)]

    def _when(self, moment: datetime) -> Any:
        # Django's SQLite format: naive UTC text; PostgreSQL takes the aware datetime.
        return str(moment.astimezone(UTC).replace(tzinfo=None)) if self.sqlite else moment

    def claim(self, item: Any, actor: str) -> bool:
        now = self._when(datetime.now(UTC))
        permit, resource, operation, audit = self.sql
        cur = self.conn.cursor()
        try:
            if self.sqlite:
                cur.execute("BEGIN IMMEDIATE")
            cur.execute(permit, (now, item.permit_id, item.proposal_id, item.digest, now))
            if cur.rowcount != 1:
                self.conn.rollback() if not self.sqlite else cur.execute("ROLLBACK")
                return False
            cur.execute(resource, (now, item.resource_id, item.revision))
            if cur.rowcount != 1:
                self.conn.rollback() if not self.sqlite else cur.execute("ROLLBACK")
                return False
            cur.execute(operation, (item.operation_id, item.tenant_id, item.proposal_id,
                                    item.permit_id, item.principal_id, item.execution_id,
                                    item.operation, item.fingerprint, now, now))
            cur.execute(audit, (item.tenant_id, now, actor, item.operation_id,
                                item.proposal_id, item.digest,
                                json.dumps({"permit_id": item.permit_id,
                                            **item.binding()})))
            if self.sqlite:
                cur.execute("COMMIT")
            else:
                self.conn.commit()
            return True
        except Exception:
            if self.sqlite:
                if self.conn.in_transaction:
                    cur.execute("ROLLBACK")
            else:
                self.conn.rollback()
            raise

    def close(self) -> None:
        self.conn.close()


# --- workers (forked from the driver) -----------------------------------------------------------


def _worker(index: int, url: str, owner_id: str, commands: Any, results: Any, barrier: Any,
            counter: Any) -> None:
    from django.db import connection
    from django.utils import timezone

    from dispatch.models import Principal
    from dispatch.services.dispatcher import proposal_dispatch
    from protocols.denials import Denial, DenialCode

    principal = Principal.objects.get(id=owner_id)
    raw = RawClaimant(url)
    while True:
        command = commands.get(timeout=900)
        if command is None:
            break
        mode, items = command
        total = 2 * len(items)
        won: list[int] = []
        lost = 0
        errors: list[str] = []
        latencies: list[float] = []
        barrier.wait(timeout=300)
        started = time.monotonic()
        while True:
            with counter.get_lock():
                ticket = counter.value
                counter.value = ticket + 1
            if ticket >= total:
                break
            number = ticket // 2
            item = items[number]
            t0 = time.perf_counter()
            try:
                if mode != "raw":  # `signed`: and the worker's permit token (bench/signing.py)
                    operation = proposal_dispatch(principal=principal, now=timezone.now(),
                                                  proposal_id=item.proposal_id, enqueue=False)
                    ok = mode == "service" or bool(sign(operation))
                else:
                    ok = raw.claim(item, principal.name)
            except Denial as denial:
                ok = False
                if denial.code is not DenialCode.PERMIT_CLAIMED:
                    errors.append(f"{denial.code.value}: {denial}")
            except Exception as exc:
                ok = False
                errors.append(f"{type(exc).__name__}: {exc}")
            latencies.append(time.perf_counter() - t0)
            if ok:
                won.append(number)
            else:
                lost += 1
        ended = time.monotonic()
        results.put((index, started, ended, won, lost, errors[:5], len(errors), latencies))
    raw.close()
    connection.close()


# --- the driver (one spawned child per backend) -------------------------------------------------


def _budget(report: Any, world: Any) -> dict[str, Any]:
    """Count what docs/design.md#write-transactions budgets: the claim's statements on approved
    emails (the full claim: permit, resource, operation, audit, budget), and the write transactions
    of a whole dispatched action on `crm.lookup` (its handler runs in-process, so steps 8-9 run here
    too)."""
    from django.db import connection
    from django.utils import timezone

    import dispatch.services.dispatcher as dispatcher
    import dispatch.services.worker as worker
    import protocols.contracts as contracts
    from bench.fixtures import approved_emails, crm_proposals
    from dispatch.models import Principal

    principal = Principal.objects.get(id=world.owner_id)
    now = timezone.now()
    emails = approved_emails(world, 21, now)
    lookups = crm_proposals(world, 21, now)
    counts = Counter[str]()
    in_claim = [False]

    def count_statement(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        counts["statements"] += 1
        # SQLite's BEGIN IMMEDIATE goes through the cursor; PostgreSQL's BEGIN does not.
        if in_claim[0] and not sql.lstrip().upper().startswith("BEGIN"):
            counts["claim_statements"] += 1
        return execute(sql, params, many, context)

    real_commit = connection.commit
    real_claim = dispatcher.operation_claim
    real_compile = contracts.compile_schema

    def commit() -> None:
        counts["commits"] += 1
        real_commit()

    def claim(**kwargs: Any) -> Any:
        in_claim[0] = True
        try:
            return real_claim(**kwargs)
        finally:
            in_claim[0] = False

    def compile_schema(schema: Any) -> Any:
        counts["compiles"] += 1
        return real_compile(schema)

    def dispatch(proposal_id: str) -> Any:
        return dispatcher.proposal_dispatch(principal=principal, proposal_id=proposal_id,
                                            now=timezone.now(), enqueue=False)

    # Warm-up: the first dispatch of a process builds the runtime and compiles validators.
    worker.operation_execute(operation_id=dispatch(lookups[0]).id)
    dispatch(emails[0].proposal_id)
    connection.commit = commit  # type: ignore[method-assign]
    dispatcher.operation_claim = claim
    contracts.compile_schema = compile_schema
    claim_statements, dispatch_statements, action_commits = Counter[int](), Counter[int](), \
        Counter[int]()
    try:
        with connection.execute_wrapper(count_statement):
            for item in emails[1:]:
                before = counts.copy()
                dispatch(item.proposal_id)
                claim_statements[counts["claim_statements"] - before["claim_statements"]] += 1
                dispatch_statements[counts["statements"] - before["statements"]] += 1
            for pid in lookups[1:]:
                before = counts.copy()
                worker.operation_execute(operation_id=dispatch(pid).id)
                action_commits[counts["commits"] - before["commits"]] += 1
    finally:
        connection.commit = real_commit  # type: ignore[method-assign]
        dispatcher.operation_claim = real_claim
        contracts.compile_schema = real_compile
    report(1, "budget counted")
    statements = claim_statements.most_common(1)[0][0]
    return {
        "actions": len(emails) - 1 + len(lookups) - 1,
        "claim_statements": statements,
        # BEGIN (or BEGIN IMMEDIATE) and COMMIT are round trips of their own on both backends.
        "claim_round_trips": statements + 2,
        "dispatch_statements": dispatch_statements.most_common(1)[0][0],
        "write_transactions_per_action": action_commits.most_common(1)[0][0],
        "validator_compiles": counts["compiles"],
    }


def drive(report: Any, url: str, plan_: dict[str, Any]) -> dict[str, Any]:
    from django.utils import timezone

    from bench.fixtures import approved_emails, make_world
    from config.forking import close_before_fork

    now = timezone.now()
    world = make_world(now)
    levels, size, repeats = plan_["levels"], plan_["items"], plan_["repeats"]
    needed = len(levels) * repeats * len(MODES) * size
    made = time.monotonic()
    items = approved_emails(world, needed, now)
    setup_seconds = time.monotonic() - made
    report(1, f"{needed} approved proposals made")
    budget = {**_budget(report, world), **mint_figures(world)}
    close_before_fork()  # no connection, nor a pool of them, crosses a fork

    ctx = multiprocessing.get_context("fork")
    rounds: list[dict[str, Any]] = []
    cursor = 0
    for level in levels:
        commands = [ctx.Queue() for _ in range(level)]
        results = ctx.Queue()
        barrier = ctx.Barrier(level)
        counter = ctx.Value("q", 0)
        procs = [ctx.Process(target=_worker, args=(i, url, world.owner_id, commands[i],
                                                   results, barrier, counter))
                 for i in range(level)]
        for proc in procs:
            proc.start()
        try:
            for rep in range(repeats):
                order = MODES[rep % 3:] + MODES[:rep % 3]
                for mode in order:
                    chunk = items[cursor:cursor + size]
                    cursor += size
                    counter.value = 0
                    for queue in commands:
                        queue.put((mode, chunk))
                    answers = [results.get(timeout=900) for _ in range(level)]
                    rounds.append(_tally(level, rep, mode, chunk, answers))
                    report(1, f"P={level} {mode} rep {rep + 1}: "
                              f"{rounds[-1]['claims_per_s']:.0f} claims/s")
        finally:
            for queue in commands:
                queue.put(None)
            for proc in procs:
                proc.join(60)
                if proc.is_alive():
                    proc.kill()
    _verify(rounds)
    return {"rounds": rounds, "budget": budget, "setup_seconds": setup_seconds,
            "pid": os.getpid()}


def _tally(level: int, rep: int, mode: str, chunk: list[Any],
           answers: list[tuple[Any, ...]]) -> dict[str, Any]:
    started = min(a[1] for a in answers)
    ended = max(a[2] for a in answers)
    won = Counter(n for a in answers for n in a[3])
    latencies = [x for a in answers for x in a[7]]
    elapsed = max(ended - started, 1e-9)
    return {
        "level": level, "rep": rep, "mode": mode, "items": len(chunk),
        "proposal_ids": [item.proposal_id for item in chunk],
        "won_items": len(won), "wins": sum(won.values()),
        "reported_double": sum(1 for c in won.values() if c > 1),
        "lost": sum(a[4] for a in answers), "errors": sum(a[6] for a in answers),
        "error_samples": [e for a in answers for e in a[5]][:5],
        "elapsed": elapsed, "claims_per_s": sum(won.values()) / elapsed,
        "attempts_per_s": 2 * len(chunk) / elapsed,
        "p50": percentile(latencies, 50), "p99": percentile(latencies, 99),
    }


def _verify(rounds: list[dict[str, Any]]) -> None:
    """From the tables: one operation, permit, audit event and dispatching resource per win."""
    from django.db.models import Count

    from dispatch.models import AuditEvent, Operation, Permit, Proposal, Resource

    for r in rounds:
        ids = r.pop("proposal_ids")
        operations = Operation.objects.filter(proposal_id__in=ids).count()
        permits = Permit.objects.filter(proposal_id__in=ids, state="claimed").count()
        events = AuditEvent.objects.filter(kind="permit.claimed", proposal_id__in=ids)
        audits = events.count()
        audit_twice = events.values("proposal_id").annotate(n=Count("id")).filter(
            n__gt=1).count()
        resource_ids = [ref["id"] for refs in Proposal.objects.filter(id__in=ids).values_list(
            "resource_refs", flat=True) for ref in refs]
        dispatching = Resource.objects.filter(id__in=resource_ids, state="dispatching").count()
        r["db"] = {"operations": operations, "claimed_permits": permits, "audits": audits,
                   "dispatching": dispatching}
        r["double_claims"] = (r["reported_double"] + audit_twice
                              + max(0, permits - operations) + max(0, audits - operations)
                              + max(0, dispatching - operations)
                              + max(0, r["wins"] - operations))
        r["consistent"] = (operations == permits == audits == dispatching == r["wins"]
                           == r["won_items"])


# --- the report ---------------------------------------------------------------------------------


def run(ctx: Context) -> Result:
    p = plan(ctx.quick)
    result = Result(NAME)
    per_backend: dict[str, Any] = {}
    for backend in ctx.dbs.backends():
        url = ctx.dbs.url(backend, "claims")
        ctx.progress.say(f"{backend}: making data")
        try:
            data = in_child(django_env(url, ctx.dbs.var), drive, url, p,
                            progress=ctx.progress, timeout=1800)
        finally:
            ctx.dbs.drop(url)
        per_backend[backend] = data
        ctx.progress.step(1)
    if ctx.dbs.pg_missing:
        result.notes.append(f"PostgreSQL skipped: {ctx.dbs.pg_missing}")

    table = Table("Claims per second (successful claims; every item raced by two claimants)",
                  ["backend", "procs", "service claims/s", "raw claims/s", "ratio",
                   "service p50/p99 ms", "raw p50/p99 ms", "errors", "double claims"])
    budget = Table("docs/design.md#dispatcher hot-path budget (claim: approved email.send; write "
                   "transactions: crm.lookup dispatched and executed)",
                   ["backend", "claim statements", "claim round trips", "write txns/action",
                    "dispatch statements", "validator compiles"])
    for backend, data in per_backend.items():
        rounds = data["rounds"]
        for level in p["levels"]:
            mine = [r for r in rounds if r["level"] == level]
            svc = [r for r in mine if r["mode"] == "service"]
            raw = [r for r in mine if r["mode"] == "raw"]
            ratios = [s["claims_per_s"] / w["claims_per_s"]
                      for s, w in zip(sorted(svc, key=lambda r: r["rep"]),
                                      sorted(raw, key=lambda r: r["rep"]), strict=True)
                      if w["claims_per_s"] > 0]
            ratio = median(ratios)
            errors = sum(r["errors"] for r in mine)
            doubles = sum(r["double_claims"] for r in mine)
            inconsistent = sum(1 for r in mine if not r["consistent"])
            table.rows.append([
                backend, level, fmt(median([r["claims_per_s"] for r in svc]), 0),
                fmt(median([r["claims_per_s"] for r in raw]), 0), f"{ratio:.0%}",
                f"{ms(median([r['p50'] for r in svc]))}/{ms(median([r['p99'] for r in svc]))}",
                f"{ms(median([r['p50'] for r in raw]))}/{ms(median([r['p99'] for r in raw]))}",
                errors, doubles if not inconsistent else f"{doubles} ({inconsistent} bad)",
            ])
            result.targets.append(Target(
                f"{backend} P={level}: service claims/s vs raw", ratio, TARGET_RATIO,
                at_least=True, unit="x raw",
                detail=f"median of {len(ratios)} paired rounds"))
            result.targets.append(Target(
                f"{backend} P={level}: double claims (from the tables)", doubles, 0,
                at_least=False, met=doubles == 0 and inconsistent == 0))
            samples = [e for r in mine for e in r["error_samples"]]
            if samples:
                result.notes.append(f"{backend} P={level} errors: {samples[:3]}")
        b = data["budget"]
        budget.rows.append([backend, b["claim_statements"], b["claim_round_trips"],
                            b["write_transactions_per_action"], b["dispatch_statements"],
                            b["validator_compiles"]])
        result.targets.append(Target(f"{backend}: claim round trips", b["claim_round_trips"],
                                     6, at_least=False))
        result.targets.append(Target(f"{backend}: write transactions per dispatched action",
                                     b["write_transactions_per_action"], 2, at_least=False))
        result.targets.append(Target(f"{backend}: validator compiles over "
                                     f"{b['actions']} dispatches", b["validator_compiles"], 0,
                                     at_least=False))
    table.note = (f"{p['items']} proposals per round, {p['repeats']} paired rounds per cell; "
                  "ratio = median of service/raw over the pairs.")
    signing, signing_targets = signing_table(per_backend, p["levels"])
    result.tables += [table, budget, signing]
    result.targets += signing_targets
    result.figures = {b: {"rounds": d["rounds"], "budget": d["budget"],
                          "setup_seconds": d["setup_seconds"]}
                      for b, d in per_backend.items()}
    return result
