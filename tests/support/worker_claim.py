"""The child side of the worker-claim tests: a worker process given an approved
`dispatch_on_approval` proposal (the body of `dispatch.tasks.proposal_run`), forked from the
test process with its connections closed, so each child opens its own."""

from __future__ import annotations

import multiprocessing
import os
from typing import Any

from django.db import connections

from config.forking import close_before_fork


def run_approved(proposal_id: str, principal_id: str, extra_env: dict[str, str],
                 barrier: Any, results: Any) -> None:
    os.environ.update(extra_env)  # failpoints are read when reached
    from dispatch.services.runs import proposal_run_approved

    try:
        if barrier is not None:
            barrier.wait(timeout=60)
        operation = proposal_run_approved(proposal_id=proposal_id, principal_id=principal_id)
        results.put(("refused", "") if operation is None else ("ran", operation.state))
    except Exception as exc:  # reported to the parent, which fails the test
        results.put(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        connections.close_all()


def start_workers(proposal_id: str, principal_id: str, count: int, *,
                  barrier: bool = True, **extra_env: str) -> tuple[list[Any], Any]:
    """`count` forked worker processes racing for one proposal; their processes and the queue
    each puts its one result on."""
    close_before_fork()  # no child shares the parent's connection or pool
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    gate = ctx.Barrier(count) if barrier else None
    procs = [ctx.Process(target=run_approved,
                         args=(proposal_id, principal_id, extra_env, gate, results))
             for _ in range(count)]
    for proc in procs:
        proc.start()
    return procs, results
