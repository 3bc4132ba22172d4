"""Bench: whole actions per second (dispatch + claim + no-op handler + outcome), three sides.

The same harness as `claims`: one driver process per backend makes the data, then forks P
worker processes (P = 1, 4, 16) that take tickets from a shared counter, round after round.
Every side runs in the same workers against the same database server, with DEBUG off and, on
SQLite, WAL with `synchronous=FULL` on every connection (the product's setting; checked and
printed). Rounds of the sides alternate inside each repeat (raw, ours, peer; then reversed), so
every ratio is taken from neighbouring rounds; the median of the per-repeat ratios is judged.

One action, per side:

- `ours`: `proposal_run` (inline execution, docs/design.md#write-transactions) of a proposal of
  `bench.noop` (a `crm.lookup`-shaped contract whose handler does no I/O: `Effect.READ`,
  idempotent, no approval; `bench/noop.py`): every re-check, the claim (proposal lock,
  operation, audit, budget) with attempt 1 in the same transaction, the handler, the outcome.
  2 write transactions.
- `raw`: exactly the writes of those 2 transactions, the same statements in the same order
  through sqlite3 / psycopg, no ORM and none of the reads (the statement lists are compared
  with the product's at run time: see "raw mirrors ours").
- `peer`: agentbarrier's `store.claim()` -> the no-op handler -> `store.complete()` on an
  action its policy allowed (2 write transactions), on its own SQLite file beside ours or its
  own schema in the same PostgreSQL database (`bench/peers.py`; skipped when not installed).

The same three sides for the action users gate, a granted `email.send` on the 2-commit path
(`ours_email`, `raw_email`, `peer_email`): ours is the worker's side of a
`dispatch_on_approval` grant (`proposal_run_approved`: the claim of the permit and the draft
with attempt 1 in one transaction, the handler with its SMTP exchange skipped, the outcome that
sends the draft), raw the same writes through the driver, and agentbarrier configured as its
README recommends for an email tool (an approval, given in the set-up, and an action limit on
the tool that every claim reserves).

And the full lifecycle: `ours_life` is `proposal_create` -> `approval_decide` (an operator's
grant) -> `proposal_run` (the worker's claim with attempt 1, then the outcome) of
`bench.noop_gated`; `peer_life` is
agentbarrier's `submit` -> `decide` -> `RuntimeBarrier.execute`.

Afterwards the tables are checked: every action has exactly one operation, one attempt, one
outcome and one of each audit event (agentbarrier: one `execution_started` and one
`execution_succeeded` receipt, and its receipt chain verifies); none was claimed twice.

`BENCH_PROFILE=1` (or `run_all.py --profile`) also profiles ours in one process at P=1 with
cProfile and prints the top 25 functions by cumulative and by total time, and the statements
of one action.
"""

from __future__ import annotations

import cProfile
import json
import multiprocessing
import os
import pstats
import re
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import (
    DEBUG_OFF,
    ROOT,
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

NAME = "actions"
TITLE = "Actions per second: ours vs the raw write set vs agentbarrier"
RAW_TARGET = 0.60
PEER_TARGET = 1.0
PEER_TARGET_PG_CONCURRENT = 1.5  # PostgreSQL at P >= 4
LIFE_TARGET = 1.0
EMAIL = "email.send"

ACTION_SIDES = ("raw", "ours", "peer")  # ours in the middle: next to both of its baselines
EMAIL_SIDES = ("raw_email", "ours_email", "peer_email")
LIFE_SIDES = ("ours_life", "peer_life")
PEER_SIDES = ("peer", "peer_email", "peer_life")
#: The action each group of sides measures, for the tables: (ours, raw, peer) and its name.
KINDS = {"noop": ("ours", "raw", "peer"), "email": ("ours_email", "raw_email", "peer_email")}
KIND_NAMES = {"noop": "bench.noop", "email": "email.send, 2-commit"}
LABELS = {"ours": "ours", "raw": "raw", "peer": "agentbarrier", "ours_life": "ours lifecycle",
          "peer_life": "agentbarrier lifecycle", "ours_email": "ours email.send",
          "raw_email": "raw email.send", "peer_email": "agentbarrier email.send"}


def plan(quick: bool) -> dict[str, Any]:
    """Sizes; `BENCH_ACTIONS_ITEMS`, `BENCH_ACTIONS_LIFE_ITEMS`, `BENCH_ACTIONS_REPEATS`,
    `BENCH_ACTIONS_LEVELS` (e.g. `1,4,16`), `BENCH_ACTIONS_CLAIMANTS` (2: every item raced by
    two workers), `BENCH_PROFILE` and `BENCH_PROFILE_ACTIONS` override them."""
    found: dict[str, Any] = (
        {"levels": [1, 4], "items": 12, "life_items": 6, "repeats": 1, "warm": 1,
         "profile_actions": 30}
        if quick else
        {"levels": [1, 4, 16], "items": 200, "life_items": 60, "repeats": 3, "warm": 2,
         "profile_actions": 300})
    found["claimants"] = 1
    for key in ("items", "life_items", "repeats", "claimants", "profile_actions"):
        env = os.environ.get(f"BENCH_ACTIONS_{key.upper()}") or (
            os.environ.get("BENCH_PROFILE_ACTIONS") if key == "profile_actions" else None)
        if env:
            found[key] = int(env)
    if os.environ.get("BENCH_ACTIONS_LEVELS"):
        found["levels"] = [int(n) for n in os.environ["BENCH_ACTIONS_LEVELS"].split(",")]
    found["profile"] = os.environ.get("BENCH_PROFILE", "") not in ("", "0")
    return found


def steps(quick: bool, backends: list[str]) -> int:
    p = plan(quick)
    sides = len(ACTION_SIDES) + len(EMAIL_SIDES) + len(LIFE_SIDES)
    return len(backends) * (3 + 2 * p["profile"]
                            + len(p["levels"]) * (1 + p["repeats"]) * sides)


# --- the raw side: the product's write set, statement for statement ----------------------------

# The product's own statements (dispatch.store.*), run with the driver alone: the same
# write set, the same commits, none of the reads and none of Django. On PostgreSQL each write
# transaction is the product's CTE where the product runs one; on SQLite its statements one by
# one. `noop`: an action without permit or resource; `email`: a granted `email.send`, whose
# claim moves its permit and its draft, and whose outcome moves the draft again.
def raw_transactions(vendor: str, kind: str = "noop") -> tuple[tuple[str, ...], ...]:
    from dispatch.store import audit, budgets, claims, operations

    if kind == "email":
        claim_move, complete_move = (_resource_move(event) for event in ("claim", "complete"))
        if vendor == "postgresql":
            return ((claims.PERMIT_CLAIM, claim_move, claims._PG_RECORD,
                     budgets.upsert_sql(2), operations._PG_START),
                    (operations._PG_MOVE_AND_END, complete_move))
        return ((claims.PERMIT_CLAIM, claim_move, operations.INSERT, audit.INSERT,
                 budgets.upsert_sql(2), operations._START, operations._INSERT_ATTEMPT,
                 audit.INSERT),
                (operations._MOVE_ANSWERED, operations._END, audit.INSERT, complete_move))
    # The claim's transaction starts attempt 1 too (the process that claims runs the handler).
    if vendor == "postgresql":
        return ((claims._PG_CLAIM_UNCANCELLED, budgets.upsert_sql(2), operations._PG_START),
                (operations._PG_MOVE_AND_END,))
    # SQLite: a claim without a permit locks no row (its BEGIN IMMEDIATE holds the database).
    return ((operations.INSERT, audit.INSERT, budgets.upsert_sql(2), operations._START,
             operations._INSERT_ATTEMPT, audit.INSERT),
            (operations._MOVE_ANSWERED, operations._END, audit.INSERT))


def _resource_move(event: str) -> str:
    """The product's compare-and-swap of a resource by `event` (its SQL)."""
    return _resource_moves(event)[0]


def _resource_moves(event: str) -> tuple[str, dict[str, str]]:
    from dispatch.store import resources
    from protocols.lifecycle import RESOURCE_PROTOCOLS, ResourceEvent

    found = resources._move_statement(ResourceEvent(event), tuple(sorted(RESOURCE_PROTOCOLS)))
    assert found is not None
    return found.sql, found.params


_WRITES = re.compile(r'INSERT INTO "|UPDATE "|DELETE FROM "')
_NAMED = re.compile(r"%\((\w+)\)s")


def _skeleton(sql: str) -> str:
    """A write statement as text, whitespace normalized; empty for a read (a SELECT, the
    grants' recursive read FOR SHARE, BEGIN)."""
    text = " ".join(sql.split())
    return text if _WRITES.search(text) else ""


def raw_skeleton(vendor: str, kind: str = "noop") -> list[list[str]]:
    return [[_skeleton(s) for s in tx] for tx in raw_transactions(vendor, kind)]


def noop_handler() -> dict[str, Any]:
    return {"ok": True}


def no_smtp(*args: Any, **kwargs: Any) -> None:
    """`email.send`'s SMTP exchange, skipped (the outside world), as the outside harness
    skips the socket: `demo.handlers.send_email` in every bench process of this module."""


class RawActions:
    """One action's two write transactions with the database driver alone."""

    def __init__(self, url: str) -> None:
        from django.conf import settings

        self.sqlite = url.startswith("sqlite")
        self.counts: Counter[str] = Counter()
        # The budget counters' limits, as the product's upsert writes them (LOAD_ENV).
        self.per_principal = settings.BUDGET_TOOL_CALLS_PER_PRINCIPAL
        self.per_execution = settings.BUDGET_TOOL_CALLS_PER_EXECUTION
        if self.sqlite:
            import sqlite3

            self.integrity: Any = sqlite3.IntegrityError
            # Autocommit mode, explicit BEGIN IMMEDIATE; the product's pragmas (Django turns
            # foreign keys on; the settings add WAL and synchronous=FULL).
            self.conn: Any = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=30,
                                             isolation_level=None)
            for pragma in ("journal_mode=WAL", "synchronous=FULL", "foreign_keys=ON"):
                self.conn.execute(f"PRAGMA {pragma}")
            mark = "?"
        else:
            import psycopg

            self.integrity = psycopg.errors.IntegrityError
            # psycopg's defaults (server-side binding, a statement prepared after 5 uses),
            # or with BENCH_RAW_PSYCOPG=django the way Django drives it (client-side binding,
            # nothing prepared).
            like_django = os.environ.get("BENCH_RAW_PSYCOPG", "") == "django"
            self.conn = psycopg.connect(url, autocommit=False, **(
                {"cursor_factory": psycopg.ClientCursor, "prepare_threshold": None}
                if like_django else {}))
            mark = "%s"
        self.vendor = "sqlite" if self.sqlite else "postgresql"
        # The product's named parameters (`%(name)s`) as sqlite3 names them (`:name`).
        self.sql = {kind: [[_NAMED.sub(r":\1", sql).replace("%s", mark) if self.sqlite
                            else sql for sql in tx] for tx in raw_transactions(self.vendor, kind)]
                    for kind in KINDS}
        self.claim_sql, self.outcome_sql = self.sql["noop"]
        self.moves = {event: _resource_moves(event)[1] for event in ("claim", "complete")}
        self.json: Any = json.dumps if self.sqlite else _jsonb

    def _when(self, moment: datetime) -> Any:
        # Django's SQLite format: naive UTC text; PostgreSQL takes the aware datetime.
        return str(moment.astimezone(UTC).replace(tzinfo=None)) if self.sqlite else moment

    def _run(self, statements: list[tuple[str, Any, int | None]]) -> bool:
        """One transaction: each statement with the row count it must have (None: any). A
        product CTE (`WITH ...`) answers its count as its one row, a `RETURNING` its rows."""
        cur = self.conn.cursor()
        try:
            if self.sqlite:
                cur.execute("BEGIN IMMEDIATE")
            for sql, params, rows in statements:
                cur.execute(sql, params)
                self.counts["statements"] += 1
                if sql.startswith("WITH"):
                    count = int(cur.fetchall()[0][0])
                elif "RETURNING" in sql:
                    count = len(cur.fetchall())
                else:
                    count = cur.rowcount
                if rows is not None and count != rows:
                    self._rollback(cur)
                    return False
            if self.sqlite:
                cur.execute("COMMIT")
            else:
                self.conn.commit()
            self.counts["transactions"] += 1
            return True
        except self.integrity:
            self._rollback(cur)  # one operation per proposal: another claimant won
            return False
        except BaseException:
            self._rollback(cur)
            raise

    def _rollback(self, cur: Any) -> None:
        if self.sqlite:
            if self.conn.in_transaction:
                cur.execute("ROLLBACK")
        else:
            self.conn.rollback()

    def action(self, item: Any, actor: str) -> bool:
        from dispatch.ids import new_id

        op = new_id("op")
        moment = datetime.now(UTC)
        now = self._when(moment)
        keys = sorted([(f"execution:{item.principal_id}:{item.execution_id}", self.per_execution),
                       (f"principal:{item.principal_id}:{moment:%Y%m%d%H}", self.per_principal)])
        budget = tuple(v for key, cap in keys for v in (key, 1, cap))
        insert = {"id": op, "tenant_id": item.tenant_id, "proposal_id": item.proposal_id,
                  "permit_id": None, "principal_id": item.principal_id,
                  "execution_id": item.execution_id, "operation": item.operation,
                  "contract_fingerprint": item.fingerprint, "now": now}
        claimed = self._audit(item, "permit.claimed", actor, op, now, {"permit_id": None},
                              digest=item.digest)
        started = self._audit(item, "attempt.started", "dispatcher", op, now, {"attempt": 1},
                              digest=item.digest)
        start = {"id": op, "number": 1, "previous": 0, "now": now}
        if self.sqlite:
            operation, audit, upsert, moved, inserted, _ = self.claim_sql
            claim = [(operation, insert, None), (audit, claimed, None), (upsert, budget, 2),
                     (moved, start, 1), (inserted, start, None), (audit, started, None)]
        else:
            cte, upsert, begin = self.claim_sql
            claim = [(cte, {**insert, "digest": item.digest, **claimed}, 1), (upsert, budget, 2),
                     (begin, {**start, **started}, 1)]
        if not self._run(claim):
            return False
        now = self._when(datetime.now(UTC))
        move = {"id": op, "source": "claimed", "target": "completed", "attempt": 1,
                "was_uncertain": False, "uncertain": False, "now": now, "answers": True,
                "result": self.json(noop_handler()), "evidence": None, "any_update": True,
                "updated_at": None, "outcome": "completed", "error": "",
                # the move asks whether the agent has webhooks, the execution is a run's
                "hearer": item.principal_id, "execution_id": item.execution_id}
        settled = self._audit(item, "operation.completed", "dispatcher", op, now,
                              {"attempt": 1, "outcome": "completed"}, digest=item.digest)
        if self.sqlite:
            moved, ended, audit = self.outcome_sql
            outcome = [(moved, move, 1), (ended, move, 1), (audit, settled, None)]
        else:
            outcome = [(self.outcome_sql[0], {**move, **settled}, None)]
        if not self._run(outcome):
            raise RuntimeError(f"raw: outcome of {op} refused")
        return True

    def email(self, item: Any, actor: str) -> bool:
        """A granted `email.send` (`item`: bench.fixtures.Claimable): the claim moves its
        permit and its draft and starts attempt 1; the outcome ends it and sends the draft."""
        op = item.operation_id
        moment = datetime.now(UTC)
        now = self._when(moment)
        keys = sorted([(f"execution:{item.principal_id}:{item.execution_id}", self.per_execution),
                       (f"principal:{item.principal_id}:{moment:%Y%m%d%H}", self.per_principal)])
        budget = tuple(v for key, cap in keys for v in (key, 1, cap))
        refs = [{"id": item.resource_id, "revision": item.revision}]
        lock = {"proposal_id": item.proposal_id, "permit_id": item.permit_id,
                "digest": item.digest, "now": now}
        draft = {**self.moves["claim"], "now": now, "revision_to": None, "id": item.resource_id,
                 "revision": item.revision}
        insert = {"id": op, "tenant_id": item.tenant_id, "proposal_id": item.proposal_id,
                  "permit_id": item.permit_id, "principal_id": item.principal_id,
                  "execution_id": item.execution_id, "operation": item.operation,
                  "contract_fingerprint": item.fingerprint, "now": now}
        claimed = self._audit(item, "permit.claimed", actor, op, now,
                              {"permit_id": item.permit_id}, digest=item.digest,
                              moves=[{**ref, "event": "claim"} for ref in refs])
        started = self._audit(item, "attempt.started", "dispatcher", op, now, {"attempt": 1},
                              digest=item.digest)
        start = {"id": op, "number": 1, "previous": 0, "now": now}
        claim_sql = self.sql["email"][0]
        claim: list[tuple[str, Any, int | None]] = [(claim_sql[0], lock, 1),
                                                    (claim_sql[1], draft, 1)]
        if self.sqlite:
            claim += [(claim_sql[2], insert, None), (claim_sql[3], claimed, None),
                      (claim_sql[4], budget, 2), (claim_sql[5], start, 1),
                      (claim_sql[6], start, None), (claim_sql[7], started, None)]
        else:
            claim += [(claim_sql[2], {**insert, **claimed}, None), (claim_sql[3], budget, 2),
                      (claim_sql[4], {**start, **started}, 1)]
        if not self._run(claim):
            return False
        now = self._when(datetime.now(UTC))
        move = {"id": op, "source": "claimed", "target": "completed", "attempt": 1,
                "was_uncertain": False, "uncertain": False, "now": now, "answers": True,
                "result": self.json({"message_id": f"{op}@console.invalid"}),
                "evidence": None, "any_update": True, "updated_at": None,
                "outcome": "completed", "error": "", "hearer": item.principal_id,
                "execution_id": item.execution_id}
        settled = self._audit(item, "operation.completed", "dispatcher", op, now,
                              {"attempt": 1, "outcome": "completed"}, digest=item.digest,
                              moves=[{**ref, "event": "complete"} for ref in refs])
        sent = {**self.moves["complete"], "now": now, "revision_to": None,
                "id": item.resource_id, "revision": item.revision}
        outcome_sql = self.sql["email"][1]
        if self.sqlite:
            outcome = [(outcome_sql[0], move, 1), (outcome_sql[1], move, 1),
                       (outcome_sql[2], settled, None), (outcome_sql[3], sent, 1)]
        else:
            outcome = [(outcome_sql[0], {**move, **settled}, None), (outcome_sql[1], sent, 1)]
        if not self._run(outcome):
            raise RuntimeError(f"raw: outcome of {op} refused")
        return True

    def _audit(self, item: Any, kind: str, actor: str, op: str, now: Any,
               details: dict[str, Any], digest: str = "",
               moves: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        # The details the product writes: the event's own, then the action's binding, then
        # the resource moves its transaction made.
        return {"audit_tenant_id": item.tenant_id, "audit_at": now, "audit_kind": kind,
                "audit_actor": actor, "audit_operation_id": op,
                "audit_proposal_id": item.proposal_id, "audit_digest": digest,
                "audit_details": self.json({**details, **item.binding(),
                                            **({"resource_moves": moves} if moves else {})})}

    def settings(self) -> dict[str, str]:
        cur = self.conn.cursor()
        if self.sqlite:
            sync = cur.execute("PRAGMA synchronous").fetchone()[0]
            mode = cur.execute("PRAGMA journal_mode").fetchone()[0]
            return {"synchronous": _SYNC.get(sync, str(sync)), "journal_mode": str(mode)}
        cur.execute("SHOW synchronous_commit")
        value = cur.fetchone()[0]
        self.conn.rollback()
        return {"synchronous_commit": str(value), **_driver(self.conn)}

    def close(self) -> None:
        self.conn.close()


def _jsonb(value: Any) -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb(value)


_SYNC = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def _driver(conn: Any) -> dict[str, str]:
    """How a psycopg connection binds parameters and whether it prepares statements."""
    import psycopg

    client = issubclass(conn.cursor_factory, psycopg.ClientCursor)
    threshold = conn.prepare_threshold
    return {"binding": "client" if client else "server",
            "prepared": "never" if threshold is None else f"from use {threshold + 1}"}


# --- our sides ----------------------------------------------------------------------------------


@dataclass
class Ours:
    """Our two kinds of action, as a worker runs them."""

    agent: Any
    operator: Any

    def action(self, item: Any) -> str:
        from django.utils import timezone

        from dispatch.services.runs import proposal_run

        done = proposal_run(principal=self.agent, proposal_id=item.proposal_id,
                            now=timezone.now())
        if done.state != "completed":
            raise RuntimeError(f"operation {done.id} ended {done.state}")
        return str(item.proposal_id)

    def email(self, item: Any) -> str:
        """The worker's side of a `dispatch_on_approval` grant of `email.send`: the claim with
        attempt 1 (one commit), the handler (its SMTP exchange skipped: `no_smtp`), the
        outcome (the second)."""
        from dispatch.services.runs import proposal_run_approved

        done = proposal_run_approved(proposal_id=item.proposal_id,
                                     principal_id=item.principal_id)
        if done is None or done.state != "completed":
            raise RuntimeError(f"email {item.proposal_id}: {done and done.state}")
        return str(item.proposal_id)

    def lifecycle(self) -> str:
        from django.utils import timezone

        from bench.noop import ARGUMENTS, NOOP_GATED
        from dispatch.services.approvals import approval_decide
        from dispatch.services.proposals import proposal_create
        from dispatch.services.runs import proposal_run

        proposal = proposal_create(principal=self.agent, operation=NOOP_GATED,
                                   arguments=ARGUMENTS, now=timezone.now())
        approval_decide(approver=self.operator, approval_id=proposal.approval.id,
                        decision="grant", digest=proposal.digest, now=timezone.now())
        done = proposal_run(principal=self.agent, proposal_id=proposal.id, now=timezone.now())
        if done.state != "completed":
            raise RuntimeError(f"operation {done.id} ended {done.state}")
        return str(proposal.id)


def email_result(action_id: str) -> Any:
    """agentbarrier's `email.send` handler: what ours answers, the socket skipped."""
    return lambda: {"message_id": f"{action_id}@console.invalid"}


def _peer_open(peer_args: dict[str, Any] | None, migrate: bool = False) -> Any:
    if peer_args is None:
        return None
    from bench.peers import Peer

    return Peer(**peer_args, migrate=migrate)


# --- workers (forked from the driver) -----------------------------------------------------------


def _worker(index: int, url: str, owner_id: str, operator_id: str, email_agent: str,
            peer_args: dict[str, Any] | None, commands: Any, results: Any, barrier: Any,
            counter: Any, claimants: int) -> None:
    from django.db import connection

    from bench.noop import ARGUMENTS, NOOP_GATED
    from dispatch.models import Principal
    from protocols.denials import Denial, DenialCode

    agent = Principal.objects.get(id=owner_id)
    ours = Ours(agent, Principal.objects.get(id=operator_id))
    raw = RawActions(url)
    peer = _peer_open(peer_args)

    def run(mode: str, item: Any) -> str | None:
        if mode == "ours":
            return ours.action(item)
        if mode == "raw":
            return item.proposal_id if raw.action(item, agent.name) else None
        if mode == "peer":
            return item[0] if peer.claim_complete(item, noop_handler) else None
        if mode == "ours_email":
            return ours.email(item)
        if mode == "raw_email":
            return item.proposal_id if raw.email(item, email_agent) else None
        if mode == "peer_email":
            return item[0] if peer.claim_complete(item, email_result(item[0])) else None
        if mode == "ours_life":
            return ours.lifecycle()
        if mode == "peer_life":
            return peer.lifecycle(NOOP_GATED, ARGUMENTS, noop_handler)
        raise ValueError(mode)

    while True:
        command = commands.get(timeout=1800)
        if command is None:
            break
        mode, items = command
        per_item = 1 if mode in LIFE_SIDES else claimants  # a lifecycle is made, not raced
        total = per_item * len(items)
        done: list[str] = []
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
            item = items[ticket // per_item]
            t0 = time.perf_counter()
            try:
                found = run(mode, item)
            except Denial as denial:
                found = None
                if denial.code is not DenialCode.PERMIT_CLAIMED or per_item == 1:
                    errors.append(f"{denial.code.value}: {denial}")
            except Exception as exc:
                found = None
                if per_item == 1 or "InProgress" not in type(exc).__name__:
                    errors.append(f"{type(exc).__name__}: {exc}")
            latencies.append(time.perf_counter() - t0)
            if found is not None:
                done.append(found)
            else:
                lost += 1
        ended = time.monotonic()
        results.put((index, started, ended, done, lost, errors[:5], len(errors), latencies))
    raw.close()
    if peer is not None:
        peer.close()
    connection.close()


# --- counts, settings, profile (in the driver) -------------------------------------------------


def _capture(run: Any, times: int) -> dict[str, Any]:
    """Run `run()` `times` times under a statement wrapper; per action: statements, round
    trips, write transactions, and the statements (and transactions) of the last one."""
    from django.db import connection

    log: list[tuple[str, str]] = []
    state: dict[str, Any] = {"tx": None}
    transactions: list[list[str]] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.lstrip()[:5].upper() == "BEGIN":  # SQLite's BEGIN IMMEDIATE: a statement
            state["tx"] = []
            log.append(("begin", sql.strip()))
        else:
            if connection.in_atomic_block and state["tx"] is None:
                state["tx"] = []  # psycopg sends BEGIN before the transaction's first statement
                log.append(("begin", "BEGIN (sent by psycopg)"))
            if state["tx"] is not None:
                state["tx"].append(sql)
            log.append(("tx" if state["tx"] is not None else "read", sql.strip()))
        return execute(sql, params, many, context)

    real_commit = connection.commit

    def commit() -> None:
        log.append(("commit", "COMMIT"))
        if state["tx"] is not None:
            transactions.append(state["tx"])
        state["tx"] = None
        real_commit()

    per_action: list[dict[str, Any]] = []
    connection.commit = commit  # type: ignore[method-assign]
    try:
        with connection.execute_wrapper(wrapper):
            for _ in range(times):
                log.clear()
                transactions.clear()
                run()
                per_action.append({"log": list(log), "transactions": list(transactions)})
    finally:
        connection.commit = real_commit  # type: ignore[method-assign]
    last = per_action[-1]
    statements = [sum(1 for kind, _ in a["log"] if kind in ("tx", "read")) for a in per_action]
    begins = [sum(1 for kind, _ in a["log"] if kind == "begin") for a in per_action]
    commits = [sum(1 for kind, _ in a["log"] if kind == "commit") for a in per_action]
    claim = next((tx for tx in last["transactions"]
                  if any('"dispatch_operation" ("id"' in s for s in tx)), [])
    return {
        "statements": Counter(statements).most_common(1)[0][0],
        "round_trips": Counter(s + b + c for s, b, c in zip(statements, begins, commits,
                                                           strict=True)).most_common(1)[0][0],
        "write_transactions": Counter(commits).most_common(1)[0][0],
        "claim_round_trips": len(claim) + 2,
        "log": last["log"],
        "skeleton": [[k for k in (_skeleton(s) for s in tx) if k]
                     for tx in last["transactions"]],
    }


def _raw_counts(raw: RawActions, runs: int, kind: str) -> dict[str, Any]:
    return {"statements": raw.counts["statements"] // runs,
            "write_transactions": raw.counts["transactions"] // runs,
            "round_trips": (raw.counts["statements"] + 2 * raw.counts["transactions"]) // runs,
            "claim_round_trips": len(raw.sql[kind][0]) + 2,
            "skeleton": raw_skeleton(raw.vendor, kind)}


def _settings_of(raw: RawActions, peer: Any) -> dict[str, dict[str, str]]:
    from django.conf import settings
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA synchronous")
            sync = cursor.fetchone()[0]
            cursor.execute("PRAGMA journal_mode")
            ours = {"synchronous": _SYNC.get(sync, str(sync)), "journal_mode": cursor.fetchone()[0]}
        else:
            cursor.execute("SHOW synchronous_commit")
            ours = {"synchronous_commit": cursor.fetchone()[0], **_driver(connection.connection)}
    found = {"ours": {"DEBUG": str(settings.DEBUG), **ours},
             "raw": {"DEBUG": "-", **raw.settings()}}
    if peer is not None:
        found["peer"] = {"DEBUG": "-", **peer.settings()}
    return found


def _where(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    if filename == "~":
        return name
    path = filename
    if "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    elif path.startswith(str(ROOT)):
        path = str(Path(path).relative_to(ROOT))
    elif "/lib/python" in path:
        path = "stdlib/" + path.split("/lib/python", 1)[1].split("/", 1)[1]
    return f"{path}:{line}({name})"


def _profile(report: Any, world: Any, kind: str, n: int) -> dict[str, Any]:
    """cProfile of ours in this one process (P=1), one kind of action (`noop`, `email`): the
    top 25 by cumulative and total time."""
    from django.utils import timezone

    from bench.fixtures import approved_emails, cloned_proposals
    from bench.noop import ARGUMENTS, NOOP
    from dispatch.models import Principal

    ours = Ours(Principal.objects.get(id=world.owner_id),
                Principal.objects.get(id=world.operator_id))
    warm = 20
    if kind == "email":
        items: list[Any] = approved_emails(world, warm + 2 * n, timezone.now(), on_approval=True)
        act = ours.email
    else:
        items = cloned_proposals(world, NOOP, ARGUMENTS, warm + 2 * n, timezone.now())
        act = ours.action
    for item in items[:warm]:
        act(item)
    t0 = time.perf_counter()
    for item in items[warm:warm + n]:
        act(item)
    plain = (time.perf_counter() - t0) / n
    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    for item in items[warm + n:]:
        act(item)
    profiler.disable()
    profiled = (time.perf_counter() - t0) / n
    stats = pstats.Stats(profiler)
    tops = {}
    for key in ("cumulative", "tottime"):
        stats.sort_stats(key)
        rows = []
        for func in stats.fcn_list[:25]:  # type: ignore[attr-defined]
            _cc, calls, total, cumulative, _ = stats.stats[func]  # type: ignore[attr-defined]
            rows.append([_where(func), f"{calls / n:.1f}", f"{total * 1000 / n:.3f}",
                         f"{cumulative * 1000 / n:.3f}"])
        tops[key] = rows
    report(1, f"profiled {kind}")
    return {"actions": n, "ms_per_action": plain * 1000,
            "ms_per_action_profiled": profiled * 1000, "top": tops}


# --- the driver (one spawned child per backend) -------------------------------------------------


def drive(report: Any, url: str, plan_: dict[str, Any],
          peer_args: dict[str, Any] | None) -> dict[str, Any]:
    from django.conf import settings
    from django.utils import timezone

    import demo.handlers
    from bench.fixtures import DRAFT, approved_emails, cloned_proposals, make_noop_world, make_world
    from bench.noop import ARGUMENTS, NOOP, NOOP_GATED
    from config.forking import close_before_fork
    from dispatch.models import Principal

    if settings.DEBUG:
        raise RuntimeError("DEBUG is on: the debug cursor would be measured too")
    demo.handlers.send_email = no_smtp  # the forked workers inherit it
    now = timezone.now()
    world = make_noop_world(now)
    mail = make_world(now)
    levels, size, repeats = plan_["levels"], plan_["items"], plan_["repeats"]
    life_size, claimants = plan_["life_items"], plan_["claimants"]
    warm = {level: plan_["warm"] * level for level in levels}  # per worker, before measuring
    needed = sum(repeats * size + warm[level] for level in levels)
    made = time.monotonic()
    counted = 10
    batches: dict[str, list[Any]] = {
        side: cloned_proposals(world, NOOP, ARGUMENTS, needed + counted, now)
        for side in ("ours", "raw")}
    for side in ("ours_email", "raw_email"):
        batches[side] = approved_emails(mail, needed + counted, now, on_approval=True)
    peer = _peer_open(peer_args, migrate=True)
    if peer is not None:
        batches["peer"] = peer.approved(needed + counted, NOOP, ARGUMENTS)
        batches["peer_email"] = peer.approved(needed + counted, EMAIL, {"draft": DRAFT},
                                              decide=True)
    setup_seconds = time.monotonic() - made
    report(1, f"{needed} actions per side made")

    # Counts per action, and the settings every side runs with.
    agent = Principal.objects.get(id=world.owner_id)
    mail_agent = Principal.objects.get(id=mail.owner_id).name
    ours = Ours(agent, Principal.objects.get(id=world.operator_id))
    raw = RawActions(url)
    spare = {side: iter(batch[needed:]) for side, batch in batches.items()}
    ours.action(next(spare["ours"]))  # warm-up: the runtime, the validators
    ours.lifecycle()
    counts: dict[str, Any] = {
        "ours": _capture(lambda: ours.action(next(spare["ours"])), counted // 2),
        "ours_life": _capture(ours.lifecycle, 3),
    }
    raw.counts.clear()
    raw_runs = counted // 2
    for _ in range(raw_runs):
        raw.action(next(spare["raw"]), agent.name)
    counts["raw"] = _raw_counts(raw, raw_runs, "noop")
    ours.email(next(spare["ours_email"]))  # warm-up
    counts["ours_email"] = _capture(lambda: ours.email(next(spare["ours_email"])),
                                    counted // 2)
    raw.counts.clear()
    for _ in range(raw_runs):
        raw.email(next(spare["raw_email"]), mail_agent)
    counts["raw_email"] = _raw_counts(raw, raw_runs, "email")

    def peer_email() -> None:
        action_id, digest = next(spare["peer_email"])
        peer.claim_complete((action_id, digest), email_result(action_id))

    if peer is not None:
        for side, run in (("peer", lambda: peer.claim_complete(next(spare["peer"]),
                                                               noop_handler)),
                          ("peer_email", peer_email),
                          ("peer_life", lambda: peer.lifecycle(NOOP_GATED, ARGUMENTS,
                                                               noop_handler))):
            run()
            with peer.counting() as c:
                for _ in range(3):
                    run()
            counts[side] = {"statements": c["statements"] // 3,
                            "round_trips": c["round_trips"] // 3,
                            "write_transactions": c["transactions"] // 3}
    settings_seen = _settings_of(raw, peer)
    raw.close()
    report(1, "counted")
    profile = ({kind: _profile(report, world if kind == "noop" else mail, kind,
                               plan_["profile_actions"]) for kind in KINDS}
               if plan_["profile"] else None)
    if peer is not None:
        peer.close()
    close_before_fork()  # no connection, nor a pool of them, crosses a fork

    sides = [s for s in (*ACTION_SIDES, *EMAIL_SIDES, *LIFE_SIDES)
             if peer is not None or s not in PEER_SIDES]
    ctx = multiprocessing.get_context("fork")
    rounds: list[dict[str, Any]] = []
    cursor = dict.fromkeys(batches, 0)

    def take(side: str, n: int) -> list[Any]:
        if side in LIFE_SIDES:
            return list(range(n))
        chunk = batches[side][cursor[side]:cursor[side] + n]
        cursor[side] += n
        return chunk

    for level in levels:
        commands = [ctx.Queue() for _ in range(level)]
        results = ctx.Queue()
        barrier = ctx.Barrier(level)
        counter = ctx.Value("q", 0)
        procs = [ctx.Process(target=_worker, args=(
            i, url, world.owner_id, world.operator_id, mail_agent, peer_args, commands[i],
            results, barrier, counter, claimants)) for i in range(level)]
        for proc in procs:
            proc.start()

        def one_round(side: str, rep: int, chunk: list[Any], *, lvl: int = level,
                      cmds: list[Any] = commands, res: Any = results, ctr: Any = counter
                      ) -> None:
            ctr.value = 0
            for queue in cmds:
                queue.put((side, chunk))
            answers = [res.get(timeout=1800) for _ in range(lvl)]
            rounds.append(_tally(lvl, rep, side, chunk, answers,
                                 1 if side in LIFE_SIDES else claimants))
            label = "warm-up" if rep < 0 else f"rep {rep + 1}"
            report(1, f"P={lvl} {LABELS[side]} {label}: {rounds[-1]['per_s']:.0f}/s")

        try:
            for side in sides:  # warm-up: connections, caches; checked, not reported
                one_round(side, -1, take(side, warm[level]))
            for rep in range(repeats):
                for group in (ACTION_SIDES, EMAIL_SIDES, LIFE_SIDES):
                    order = group if rep % 2 == 0 else tuple(reversed(group))
                    for side in order:
                        if side in sides:
                            one_round(side, rep, take(side, size if side not in LIFE_SIDES
                                                      else life_size))
                        else:
                            report(1)
        finally:
            for queue in commands:
                queue.put(None)
            for proc in procs:
                proc.join(60)
                if proc.is_alive():
                    proc.kill()
        if peer is None:
            report(len(PEER_SIDES))  # the skipped warm-up rounds
    _verify(rounds, _peer_open(peer_args))
    return {"rounds": rounds, "counts": counts, "settings": settings_seen, "profile": profile,
            "setup_seconds": setup_seconds, "claimants": claimants}


def _tally(level: int, rep: int, side: str, chunk: list[Any],
           answers: list[tuple[Any, ...]], claimants: int) -> dict[str, Any]:
    started = min(a[1] for a in answers)
    ended = max(a[2] for a in answers)
    done = Counter(x for a in answers for x in a[3])
    latencies = [x for a in answers for x in a[7]]
    elapsed = max(ended - started, 1e-9)
    ids = ([item.proposal_id for item in chunk] if side in ("ours", "raw", *EMAIL_SIDES[:2])
           else [item[0] for item in chunk] if side in ("peer", "peer_email") else list(done))
    lost = sum(a[4] for a in answers)
    errors = sum(a[6] for a in answers)
    samples = [e for a in answers for e in a[5]][:5]
    if claimants == 1 and lost > errors:  # nobody else could have taken it: unexplained
        samples.append(f"{lost - errors} actions refused without an error")
        errors = lost
    return {
        "level": level, "rep": rep, "side": side, "items": len(chunk), "ids": ids,
        "done": sum(done.values()), "done_items": len(done),
        "reported_double": sum(1 for c in done.values() if c > 1),
        "lost": lost, "errors": errors, "error_samples": samples,
        "elapsed": elapsed, "per_s": sum(done.values()) / elapsed,
        "p50": percentile(latencies, 50), "p99": percentile(latencies, 99),
    }


def _verify(rounds: list[dict[str, Any]], peer: Any) -> None:
    """From the tables: for every action done, exactly one of each row it must leave."""
    from django.db.models import Count

    from dispatch.models import (
        ApprovalRequest,
        Attempt,
        AuditEvent,
        Operation,
        Permit,
        Proposal,
        Resource,
    )

    tally = peer.tally() if peer is not None else None
    if peer is not None:
        peer.close()
    for r in rounds:
        ids = r.pop("ids")
        if r["side"] in PEER_SIDES:
            assert tally is not None
            succeeded = sum(1 for i in ids if tally["status"].get(i) == "succeeded")
            started = [tally["events"][(i, "execution_started")] for i in ids]
            finished = [tally["events"][(i, "execution_succeeded")] for i in ids]
            r["db"] = {"succeeded": succeeded, "started": sum(started),
                       "finished": sum(finished), "chain_ok": tally["chain_ok"]}
            twice = sum(1 for n in started if n > 1)
            r["double_claims"] = r["reported_double"] + twice
            r["consistent"] = (succeeded == sum(started) == sum(finished) == r["done"]
                               == r["done_items"] and tally["chain_ok"])
            continue
        operations = Operation.objects.filter(proposal_id__in=ids)
        ops = operations.count()
        completed = operations.filter(state="completed").count()
        attempts = Attempt.objects.filter(operation__proposal_id__in=ids)
        attempts_done = attempts.filter(number=1, outcome="completed",
                                        ended_at__isnull=False).count()
        events = AuditEvent.objects.filter(proposal_id__in=ids)
        kinds = Counter(dict(events.values_list("kind").annotate(n=Count("id"))))
        twice = (events.filter(kind__in=("permit.claimed", "attempt.started"))
                 .values("proposal_id", "kind").annotate(n=Count("id")).filter(n__gt=1).count())
        r["db"] = {"operations": ops, "completed": completed, "attempts": attempts.count(),
                   "attempts_completed": attempts_done, **{k: kinds[k] for k in (
                       "permit.claimed", "attempt.started", "operation.completed")}}
        expected = [ops, completed, r["db"]["attempts"], attempts_done, kinds["permit.claimed"],
                    kinds["attempt.started"], kinds["operation.completed"], r["done"],
                    r["done_items"]]
        if r["side"] == "ours_life":
            granted = ApprovalRequest.objects.filter(proposal_id__in=ids,
                                                     state="granted").count()
            r["db"]["granted"] = granted
            expected.append(granted)
        if r["side"] in EMAIL_SIDES:  # the permit claimed once, the draft sent
            claimed = Permit.objects.filter(proposal_id__in=ids, state="claimed").count()
            drafts = [ref["id"] for refs in Proposal.objects.filter(id__in=ids).values_list(
                "resource_refs", flat=True) for ref in refs]
            sent = Resource.objects.filter(id__in=drafts, state="sent").count()
            r["db"].update(permits_claimed=claimed, drafts_sent=sent)
            expected += [claimed, sent]
        r["double_claims"] = (r["reported_double"] + twice + max(0, ops - r["done_items"])
                              + max(0, r["db"]["attempts"] - ops))
        r["consistent"] = len(set(expected)) == 1


# --- the report ---------------------------------------------------------------------------------


def _pairs(rounds: list[dict[str, Any]], level: int, a: str, b: str) -> list[float]:
    """a/b of the two sides' rounds in the same repeat (neighbouring rounds)."""
    mine = {r["rep"]: r for r in rounds if r["level"] == level and r["side"] == a
            and r["rep"] >= 0}
    base = {r["rep"]: r for r in rounds if r["level"] == level and r["side"] == b
            and r["rep"] >= 0}
    return [mine[k]["per_s"] / base[k]["per_s"] for k in sorted(mine)
            if k in base and base[k]["per_s"] > 0]


def _rate(rounds: list[dict[str, Any]], level: int, side: str) -> float:
    return median([r["per_s"] for r in rounds if r["level"] == level and r["side"] == side
                   and r["rep"] >= 0])


def _lat(rounds: list[dict[str, Any]], level: int, side: str) -> str:
    mine = [r for r in rounds if r["level"] == level and r["side"] == side and r["rep"] >= 0]
    if not mine:
        return "-"
    return f"{ms(median([r['p50'] for r in mine]))}/{ms(median([r['p99'] for r in mine]))}"


def _ratio(values: list[float]) -> str:
    return f"{median(values):.2f}" if values else "-"


def run(ctx: Context) -> Result:
    from bench.peers import PEER, PEER_VERSION, missing

    p = plan(ctx.quick)
    result = Result(NAME)
    absent = missing()
    if absent:
        result.notes.append(f"agentbarrier: {absent}; measuring ours vs raw only")
    per_backend: dict[str, Any] = {}
    for backend in ctx.dbs.backends():
        url = ctx.dbs.url(backend, "actions")
        peer_file = ""
        peer_args: dict[str, Any] | None = None
        if not absent:
            if backend == "sqlite":
                peer_file = url.removeprefix("sqlite:///") + "-agentbarrier.sqlite3"
                peer_args = {"sqlite_path": peer_file}
            else:
                peer_args = {"postgres_url": url}
        ctx.progress.say(f"{backend}: making data")
        env = django_env(url, ctx.dbs.var, **DEBUG_OFF,
                         DISPATCH_EXTENSIONS="demo.extension,bench.noop")
        try:
            per_backend[backend] = in_child(env, drive, url, p, peer_args,
                                            progress=ctx.progress, timeout=3600)
        finally:
            ctx.dbs.drop(url)
            if peer_file:
                ctx.dbs.drop(f"sqlite:///{peer_file}")
        ctx.progress.step(1)
    if ctx.dbs.pg_missing:
        result.notes.append(f"PostgreSQL skipped: {ctx.dbs.pg_missing}")
    peer_name = "agentbarrier" if absent else f"{PEER} {PEER_VERSION}"

    actions = Table("Actions per second (claim with attempt 1 + handler + outcome; ours and "
                    f"raw: 2 write transactions, {peer_name}: claim + complete)",
                    ["backend", "action", "procs", "ours/s", "raw/s", "ours/raw",
                     "agentbarrier/s", "ours/agentbarrier", "errors", "double claims"])
    life = Table("Full lifecycle per second (ours: propose -> grant -> claim and run; "
                 "agentbarrier: submit -> decide -> execute)",
                 ["backend", "procs", "ours/s", "agentbarrier/s", "ours/agentbarrier",
                  "errors", "double claims"])
    latency = Table("Latency per action, p50/p99 ms (medians over the repeats)",
                    ["backend", "procs", *(LABELS[s] for s in (*ACTION_SIDES, *EMAIL_SIDES,
                                                               *LIFE_SIDES))])
    counts = Table("Per action: statements, round trips and write transactions (BEGIN and "
                   "COMMIT are round trips; a read outside a transaction is one)",
                   ["backend", "side", "statements", "round trips", "write txns",
                    "claim round trips"])
    seen = Table("Settings each side ran with", ["backend", "side", "DEBUG", "durability, driver"])
    for backend, data in per_backend.items():
        rounds = data["rounds"]
        for level in p["levels"]:
            cell = [r for r in rounds if r["level"] == level]
            lif = [r for r in cell if r["side"] in LIFE_SIDES]
            has_peer = any(r["side"] == "peer" for r in cell)
            where = f"{backend} P={level}"
            for kind, (mine, bare, theirs) in KINDS.items():
                act = [r for r in cell if r["side"] in (mine, bare, theirs)]
                raw_pairs = _pairs(rounds, level, mine, bare)
                peer_pairs = _pairs(rounds, level, mine, theirs)
                actions.rows.append([
                    backend, KIND_NAMES[kind], level, fmt(_rate(rounds, level, mine), 0),
                    fmt(_rate(rounds, level, bare), 0), _ratio(raw_pairs),
                    fmt(_rate(rounds, level, theirs), 0) if has_peer else "-",
                    _ratio(peer_pairs) if has_peer else "-",
                    sum(r["errors"] for r in act), _doubles(act)])
                named = f"{where} {kind}"
                result.targets.append(Target(f"{named}: ours vs raw", median(raw_pairs),
                                             RAW_TARGET, at_least=True, unit="x raw",
                                             detail=f"{len(raw_pairs)} pairs"))
                if has_peer:
                    limit = (PEER_TARGET_PG_CONCURRENT if backend == "postgres" and level >= 4
                             else PEER_TARGET)
                    result.targets.append(Target(f"{named}: ours vs agentbarrier",
                                                 median(peer_pairs), limit, at_least=True,
                                                 unit="x peer",
                                                 detail=f"{len(peer_pairs)} pairs"))
            life_pairs = _pairs(rounds, level, "ours_life", "peer_life")
            life.rows.append([
                backend, level, fmt(_rate(rounds, level, "ours_life"), 0),
                fmt(_rate(rounds, level, "peer_life"), 0) if has_peer else "-",
                _ratio(life_pairs) if has_peer else "-",
                sum(r["errors"] for r in lif), _doubles(lif)])
            latency.rows.append([backend, level, *(_lat(rounds, level, s) for s in (
                *ACTION_SIDES, *EMAIL_SIDES, *LIFE_SIDES))])
            if has_peer:
                result.targets.append(Target(f"{where}: lifecycle ours vs agentbarrier",
                                             median(life_pairs), LIFE_TARGET, at_least=True,
                                             unit="x peer", detail=f"{len(life_pairs)} pairs"))
            samples = [e for r in cell for e in r["error_samples"]]
            if samples:
                result.notes.append(f"{where} errors: {samples[:3]}")
        every = rounds  # warm-up rounds included: their rows are checked too
        errors = sum(r["errors"] for r in every)
        doubles = sum(r["double_claims"] for r in every)
        bad = sum(1 for r in every if not r["consistent"])
        result.targets.append(Target(f"{backend}: errors, every side and round", errors, 0,
                                     at_least=False))
        result.targets.append(Target(f"{backend}: double claims (from the tables)", doubles, 0,
                                     at_least=False, met=doubles == 0 and bad == 0,
                                     detail=f"{bad} rounds inconsistent" if bad else ""))
        for kind, (mine, _bare, _theirs) in KINDS.items():
            if backend == "postgres" and {1, 4} <= set(p["levels"]):
                rise = _rate(rounds, 4, mine) / max(_rate(rounds, 1, mine), 1e-9)
                result.targets.append(Target(f"postgres {kind}: ours P=4 vs P=1 (rises)", rise,
                                             1.0, at_least=True, unit="x", met=rise > 1.0))
            if backend == "postgres" and {4, 16} <= set(p["levels"]):
                hold = _rate(rounds, 16, mine) / max(_rate(rounds, 4, mine), 1e-9)
                result.targets.append(Target(f"postgres {kind}: ours P=16 vs P=4 (does not "
                                             "fall)", hold, 1.0, at_least=True, unit="x"))
        c = data["counts"]
        for side in (*ACTION_SIDES[1::-1], "peer", *EMAIL_SIDES[1::-1], "peer_email",
                     *LIFE_SIDES):
            if side in c:
                counts.rows.append([backend, LABELS[side], c[side]["statements"],
                                    c[side]["round_trips"], c[side]["write_transactions"],
                                    c[side].get("claim_round_trips", "-")])
        for kind, (mine, bare, _theirs) in KINDS.items():
            result.targets.append(Target(f"{backend} {kind}: ours write transactions per "
                                         "action", c[mine]["write_transactions"], 2,
                                         at_least=False))
            mirrored = c[mine]["skeleton"] == c[bare]["skeleton"]
            result.targets.append(Target(f"{backend} {kind}: raw mirrors ours' write "
                                         "statements", int(mirrored), 1, at_least=True,
                                         met=mirrored))
            if not mirrored:
                drift = _drift(c[mine]["skeleton"], c[bare]["skeleton"])
                result.notes.append(f"{backend} {kind}: raw no longer mirrors ours, update "
                                    f"raw_transactions in bench/actions.py: {drift}")
        # The claim's budget of 7 (docs/design.md#write-transactions) plus attempt 1's start,
        # which rides in the claim's transaction (one CTE on PostgreSQL).
        result.targets.append(Target(f"{backend}: ours claim round trips, attempt 1 included",
                                     c["ours"]["claim_round_trips"], 8, at_least=False))
        durable = True
        for side, values in data["settings"].items():
            durability = ", ".join(f"{k}={v}" for k, v in values.items() if k != "DEBUG")
            seen.rows.append([backend, LABELS[side], values["DEBUG"], durability])
            durable &= values.get("synchronous", "FULL") == "FULL" and values.get(
                "synchronous_commit", "on") == "on"
        result.targets.append(Target(f"{backend}: every side commits durably "
                                     "(synchronous=FULL / synchronous_commit=on)",
                                     int(durable), 1, at_least=True, met=durable))
        for kind, prof in (data["profile"] or {}).items():
            mine = KINDS[kind][0]
            for key, label in (("cumulative", "cumulative"), ("tottime", "total")):
                result.tables.append(Table(
                    f"cProfile of ours, {KIND_NAMES[kind]}, one process (P=1), {backend}: top "
                    f"25 by {label} time ({prof['actions']} actions; "
                    f"{prof['ms_per_action']:.2f} ms per action unprofiled, "
                    f"{prof['ms_per_action_profiled']:.2f} ms profiled)",
                    ["function", "calls/action", "tottime ms/action", "cumtime ms/action"],
                    prof["top"][key]))
            result.tables.append(Table(
                f"Statements of one action of ours, {KIND_NAMES[kind]}, {backend} "
                f"({c[mine]['statements']} statements, {c[mine]['round_trips']} round trips)",
                ["#", "kind", "statement"],
                [[i + 1, what, _short(sql)] for i, (what, sql) in enumerate(c[mine]["log"])]))
    actions.note = (f"{p['items']} actions per round, {p['repeats']} repeats per cell, "
                    f"{p['claimants']} claimant(s) per action; ratios = median over the "
                    "repeats of the ratio of neighbouring rounds. Noisy on a shared machine.")
    life.note = f"{p['life_items']} lifecycles per round, {p['repeats']} repeats per cell."
    result.tables[:0] = [actions, life, latency, counts, seen]
    # The statement lists are for the profile's table, not the JSON file.
    result.figures = {b: {**d, "counts": {side: {k: v for k, v in c.items() if k != "log"}
                                          for side, c in d["counts"].items()}}
                      for b, d in per_backend.items()}
    return result


def _drift(ours: list[list[str]], raw: list[list[str]]) -> str:
    """Where two write sets differ, transaction by transaction, statement by statement."""
    if len(ours) != len(raw):
        return f"ours writes in {len(ours)} transactions, raw in {len(raw)}"
    found = []
    for number, (mine, theirs) in enumerate(zip(ours, raw, strict=True), 1):
        for index in range(max(len(mine), len(theirs))):
            a = mine[index] if index < len(mine) else ""
            b = theirs[index] if index < len(theirs) else ""
            if a != b:
                found.append(f"transaction {number} statement {index + 1}: ours {a} / raw {b}")
    return "; ".join(found)


def _doubles(rounds: list[dict[str, Any]]) -> str | int:
    doubles = sum(r["double_claims"] for r in rounds)
    bad = sum(1 for r in rounds if not r["consistent"])
    return doubles if not bad else f"{doubles} ({bad} bad)"


def _short(sql: str, width: int = 110) -> str:
    text = " ".join(sql.split())
    text = re.sub(r'SELECT ("\w+"\."\w+", )+("\w+"\."\w+")', "SELECT …", text)
    return text if len(text) <= width else text[:width - 1] + "…"
