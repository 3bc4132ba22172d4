"""The bench peer, agentbarrier (LIBRARIES.md, "Bench peer"): the only module that imports it.

It is an optional dependency (`pip install -e '.[bench]'`); without it `missing()` says why and
the benches measure ours against the raw SQL alone. Everything below uses its public API, read
from its installed source (agentbarrier 1.1.0, `agentbarrier/runtime/`):

- `SQLiteRuntimeStore(path)` (WAL, `synchronous=FULL`, `BEGIN IMMEDIATE` per write
  transaction) and `PostgresRuntimeStore(dsn, schema=, create_schema=, migrate=)` (one
  transaction-level advisory lock per schema taken by every write transaction);
- `store.submit(request, decision)`, `store.decide(action_id, Decision.APPROVE, decided_by=)`,
  `store.claim(action_id, request_digest=)` -> `ExecutionClaim`, `store.complete(...)`;
- `RuntimeBarrier(policy=, store=, namespace=, requested_by=).execute(tool_name=, arguments=,
  idempotency_key=, operation=)`: the gated call an agent makes once its action is approved
  (it submits again, finds the approved action by its idempotency key, claims, runs, completes).

Only the statement counter reaches under the API (`store._connection`): it wraps the store's
connection while a few actions are counted, never during a measured round.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from contextlib import contextmanager
from importlib import metadata
from typing import Any

PEER = "agentbarrier"
PEER_VERSION = "1.1.0"
NAMESPACE = "bench"
REQUESTER = "bench-agent"
OPERATOR = "bench-operator"
SCHEMA = "agentbarrier"
EMAIL = "email.send"


def missing() -> str:
    """'' when the peer can be imported at the pinned version, else why not."""
    try:
        import agentbarrier.runtime  # noqa: F401
    except ImportError as exc:
        return f"peer not installed ({exc}); pip install -e '.[bench]'"
    version = metadata.version(PEER)
    if version != PEER_VERSION:
        return f"peer is agentbarrier {version}, the bench is written for {PEER_VERSION}"
    return ""


class _Counting:
    """Stands in for a connection: counts each `execute` (one round trip) and passes it on."""

    def __init__(self, inner: Any, counts: Counter[str]) -> None:
        self._inner = inner
        self._counts = counts

    def execute(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
        text = str(statement).strip().upper()
        self._counts["round_trips"] += 1
        if text.startswith("BEGIN"):
            self._counts["transactions"] += 1
        elif text not in ("COMMIT", "ROLLBACK"):
            self._counts["statements"] += 1
        return self._inner.execute(statement, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class Peer:
    """One process's agentbarrier store and barrier, on the bench's database server."""

    def __init__(self, *, postgres_url: str = "", sqlite_path: str = "",
                 migrate: bool = False) -> None:
        from agentbarrier.runtime import (
            PolicyEffect,
            PolicyRule,
            PostgresRuntimeStore,
            RuntimeBarrier,
            RuntimePolicy,
            SQLiteRuntimeStore,
        )

        self.postgres = bool(postgres_url)
        if self.postgres:
            self.store: Any = PostgresRuntimeStore(postgres_url, schema=SCHEMA,
                                                   create_schema=migrate, migrate=migrate)
        else:
            self.store = SQLiteRuntimeStore(sqlite_path)
        self.policy = RuntimePolicy(version="bench-1", rules=(
            PolicyRule(name="noop", effect=PolicyEffect.ALLOW, tool="bench.noop"),
            PolicyRule(name="gated", effect=PolicyEffect.REQUIRE_APPROVAL,
                       tool="bench.noop_gated", approval_ttl_seconds=3600),
            # The action users gate, as agentbarrier's README recommends for "a communications
            # agent sending external email": an approval, and a limit on the tool (below).
            PolicyRule(name="email", effect=PolicyEffect.REQUIRE_APPROVAL, tool=EMAIL,
                       approval_ttl_seconds=3600),
        ))
        if migrate:
            # "Limits reduce blast radius": a fixed-window action limit on the tool, reserved
            # atomically by every claim (high enough never to block the load; ours takes its
            # budget counters the same way, LOAD_ENV).
            self.store.configure_limit(
                "bench-email", window_seconds=3600.0, updated_by=OPERATOR,
                reason="bench: limit email sends", namespace=NAMESPACE, tool_name=EMAIL,
                max_actions=1_000_000_000)
        self.barrier = RuntimeBarrier(policy=self.policy, store=self.store, namespace=NAMESPACE,
                                      requested_by=REQUESTER)

    # --- the measured work ----------------------------------------------------------------------

    def _request(self, tool: str, arguments: dict[str, Any], key: str) -> Any:
        from agentbarrier.runtime import RuntimeRequest

        return RuntimeRequest(action_id=str(uuid.uuid4()), namespace=NAMESPACE, tool_name=tool,
                              arguments=arguments, idempotency_key=key,
                              policy_version=self.policy.version, created_at_ns=time.time_ns(),
                              requested_by=REQUESTER)

    def submit(self, tool: str, arguments: dict[str, Any], key: str) -> Any:
        request = self._request(tool, arguments, key)
        return self.store.submit(request, self.policy.evaluate(tool, request.arguments))

    def approved(self, count: int, tool: str, arguments: dict[str, Any],
                 decide: bool = False) -> list[tuple[str, str]]:
        """Set-up: `count` actions the policy allows (status `approved`), as (id, digest);
        `decide`: actions the policy holds for approval, each approved by the operator."""
        from agentbarrier.models import Decision

        made = []
        for _ in range(count):
            action = self.submit(tool, arguments, uuid.uuid4().hex)
            if decide:
                self.store.decide(action.action_id, Decision.APPROVE, decided_by=OPERATOR)
            made.append((action.action_id, action.request_digest))
        return made

    def claim_complete(self, item: tuple[str, str], handler: Any) -> bool:
        """store.claim() -> the no-op handler -> store.complete(): 2 write transactions."""
        from agentbarrier.runtime import ClaimOutcome

        action_id, digest = item
        claim = self.store.claim(action_id, request_digest=digest)
        if claim.outcome is not ClaimOutcome.EXECUTE:
            return False
        self.store.complete(action_id, request_digest=digest, result=handler())
        return True

    def lifecycle(self, tool: str, arguments: dict[str, Any], handler: Any) -> str:
        """submit (pending) -> decide (approve) -> the barrier's execute: 5 write transactions
        (execute submits again, finding the approved action by its key, then claims and
        completes). Returns the action id."""
        from agentbarrier.models import Decision

        key = uuid.uuid4().hex
        action = self.submit(tool, arguments, key)
        self.store.decide(action.action_id, Decision.APPROVE, decided_by=OPERATOR)
        self.barrier.execute(tool_name=tool, arguments=arguments, idempotency_key=key,
                             operation=handler)
        return str(action.action_id)

    # --- checks and counts ----------------------------------------------------------------------

    @contextmanager
    def counting(self) -> Any:
        """Count statements, round trips and write transactions at the driver's own call."""
        counts: Counter[str] = Counter()
        if self.postgres:
            # _PostgresConnection turns BEGIN IMMEDIATE into BEGIN, set_config, advisory lock;
            # count what reaches psycopg.
            outer = self.store._connection
            inner = outer._connection
            outer._connection = _Counting(inner, counts)
            try:
                yield counts
            finally:
                outer._connection = inner
        else:
            inner = self.store._connection
            self.store._connection = _Counting(inner, counts)
            try:
                yield counts
            finally:
                self.store._connection = inner

    def tally(self) -> dict[str, Any]:
        """Every action's status and every receipt, for the tables check."""
        actions = {a.action_id: a.status.value for a in self.store.list_actions()}
        events: Counter[tuple[str, str]] = Counter(
            (r.action_id, r.event.value) for r in self.store.receipts())
        return {"status": actions, "events": events,
                "chain_ok": bool(self.store.verify_receipt_chain())}

    def settings(self) -> dict[str, str]:
        """What durability the peer's connection runs with."""
        if self.postgres:
            row = self.store._connection.execute("SHOW synchronous_commit").fetchone()
            raw = self.store._connection._connection
            return {"synchronous_commit": str(row["synchronous_commit"]),
                    "binding": "server", "prepared": f"from use {raw.prepare_threshold + 1}"}
        sync = self.store._connection.execute("PRAGMA synchronous").fetchone()[0]
        mode = self.store._connection.execute("PRAGMA journal_mode").fetchone()[0]
        return {"synchronous": {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(sync, str(sync)),
                "journal_mode": str(mode)}

    def close(self) -> None:
        self.store.close()
