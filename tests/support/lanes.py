"""The child side of the lane races: each process runs every lane of a parallel step, then
the execution itself, as any number of workers and wake-ups may at once."""

from __future__ import annotations

from typing import Any


def lane_racer(env: dict[str, str], execution_id: str, lanes: list[list[str]], barrier: Any,
               results: Any, index: int) -> None:
    from tests.support.processes import setup_child

    setup_child(env)
    from django.db import connection

    answers: list[str] = []
    barrier.wait(timeout=60)
    try:  # the imports too: a child that cannot start reports why instead of going silent
        from django.utils import timezone

        from dispatch.models import Execution
        from dispatch.workflows import run_workflow
        from dispatch.workflows.branches import run_branch
        from dispatch.workflows.resume import rebuild

        for focus in lanes[index % len(lanes):] + lanes[:index % len(lanes)]:
            answers.append(run_branch(execution_id, [focus], now=timezone.now()))
        execution = Execution.objects.select_related("principal").get(id=execution_id)
        answers.append(run_workflow(rebuild(execution), principal=execution.principal,
                                    execution_id=execution_id).state)
    except Exception as exc:  # reported to the parent, which fails the test
        answers.append(f"error: {type(exc).__name__}: {exc}")
    results.put((index, answers))
    connection.close()
