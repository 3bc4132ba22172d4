"""The chaos soak's faults (bench/chaos.py): a schedule drawn from the seed, and how each kind is
injected into the private stack (bench/chaos_stack.py).

Kinds: `worker_main` (SIGKILL of a Celery worker's main process; its orphaned pool is killed a
moment later, as the supervisor restarts the worker), `worker_pool` (SIGKILL of one pool
process: the main process replaces it), `redis_restart` (SIGKILL of Redis, which keeps nothing
on disk, then a new one on the same port), `pg_restart` (PostgreSQL stopped in `immediate` mode,
a crash: no checkpoint, every backend aborted; then started again), `dest_stall` (the
destinations stop answering: SIGSTOP, then SIGCONT), `dest_lossy` (for a while the agents'
actions carry the destinations' `lose-response-once.test` trigger: the effect is recorded and
the response lost), `web_kill` (SIGKILL of a gunicorn worker while the load is running, so
mid-request: the master starts another).
"""

from __future__ import annotations

import os
import random
import signal
import time
from contextlib import suppress
from dataclasses import dataclass

from bench.chaos_load import Shared
from bench.chaos_stack import Stack

KINDS = ("worker_main", "worker_pool", "redis_restart", "pg_restart", "dest_stall",
         "dest_lossy", "web_kill")
#: Relative frequency of each kind in a full run: the cheap process kills most often.
WEIGHTS = {"worker_main": 3, "worker_pool": 3, "redis_restart": 1, "pg_restart": 1,
           "dest_stall": 1, "dest_lossy": 1, "web_kill": 3}


@dataclass
class Fault:
    at: float  # seconds after the start of the load
    kind: str
    target: int  # which worker or web process, modulo how many there are
    length: float  # seconds down, stalled or lossy


@dataclass
class Injected:
    fault: Fault
    started: float  # monotonic
    detail: str
    recovered_in: float | None = None


def schedule(seed: int, seconds: float, count: int, *, every_kind_first: bool) -> list[Fault]:
    """`count` faults spread over `seconds`, drawn from `seed` alone. With `every_kind_first`
    the first faults are one of each kind, in a seeded order (the smoke run's guarantee)."""
    rng = random.Random(seed)
    kinds: list[str] = []
    if every_kind_first:
        kinds = list(KINDS)
        rng.shuffle(kinds)
    population = [kind for kind in KINDS for _ in range(WEIGHTS[kind])]
    while len(kinds) < count:
        kinds.append(rng.choice(population))
    gap = seconds / max(count, 1)
    faults, at = [], gap * 0.5
    for kind in kinds[:count]:
        faults.append(Fault(round(at, 2), kind, rng.randrange(1000),
                            round(rng.uniform(0.5, 3.0) if kind.endswith("restart")
                                  else rng.uniform(2.0, 8.0), 2)))
        at += gap * rng.uniform(0.5, 1.5)
    return faults


def inject(stack: Stack, fault: Fault, shared: Shared) -> str:
    """Inject `fault` now; returns what was done. Blocks for a restart's downtime."""
    kind = fault.kind
    if kind == "worker_main":
        n = fault.target % stack.workers + 1
        child = stack.children[f"worker{n}"]
        assert child.proc is not None
        child.held = True
        with suppress(ProcessLookupError):
            os.kill(child.proc.pid, signal.SIGKILL)
        time.sleep(1.0)
        child.kill()  # what is left of its session: the orphaned pool
        child.held = False
        return f"worker{n} main pid {child.proc.pid}"
    if kind == "worker_pool":
        n = fault.target % stack.workers + 1
        pids = stack.pool_pids(n)
        if not pids:
            return f"worker{n}: no pool process (restarting)"
        pid = pids[fault.target % len(pids)]
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return f"worker{n} pool pid {pid}"
    if kind == "redis_restart":
        stack.redis_crash()
        time.sleep(fault.length)
        stack.redis_start()
        return f"redis down {fault.length}s"
    if kind == "pg_restart":
        stack.pg_crash()
        time.sleep(fault.length)
        stack.pg_start()
        return f"postgresql down {fault.length}s"
    if kind == "dest_stall":
        child = stack.children["destinations"]
        assert child.proc is not None
        os.kill(child.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(fault.length)
        finally:
            os.kill(child.proc.pid, signal.SIGCONT)
        return f"destinations stalled {fault.length}s"
    if kind == "dest_lossy":
        shared.lossy_until = time.monotonic() + fault.length
        return f"responses lost for {fault.length}s of proposals"
    if kind == "web_kill":
        pids = stack.web_worker_pids()
        if not pids:
            return "web: no worker (restarting)"
        pid = pids[fault.target % len(pids)]
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return f"web worker pid {pid}"
    raise ValueError(kind)
