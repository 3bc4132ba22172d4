"""The child side of the journal race: each process appends to one execution's journal."""

from __future__ import annotations

from typing import Any


def journal_writer(env: dict[str, str], execution_id: str, rounds: int, barrier: Any,
                   results: Any, index: int) -> None:
    """Each round, wait at the barrier, then journal the round's shared call (both writers
    write it) and this writer's own call; report the payload recorded for the shared one."""
    from tests.support.processes import setup_child

    setup_child(env)
    from django.db import connection
    from django.utils import timezone

    from dispatch.models import TranscriptEntry
    from dispatch.services.executions import journal_append

    for number in range(rounds):
        barrier.wait(timeout=60)
        try:
            shared = journal_append(execution_id=execution_id,
                                    kind=TranscriptEntry.Kind.TOOL_CALL, call_id=f"call-{number}",
                                    payload={"writer": index}, now=timezone.now())
            journal_append(execution_id=execution_id, kind=TranscriptEntry.Kind.TOOL_CALL,
                           call_id=f"own-{index}-{number}", payload={"writer": index},
                           now=timezone.now())
            outcome: Any = shared["writer"]
        except Exception as exc:  # reported to the parent, which fails the test
            outcome = f"error: {type(exc).__name__}: {exc}"
        results.put((number, index, outcome))
    connection.close()
