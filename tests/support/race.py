"""The child side of the claim races: each process dispatches through the service layer."""

from __future__ import annotations

from typing import Any


def racer(env: dict[str, str], principal_id: str, rounds: list[list[str]], barrier: Any,
          results: Any, index: int) -> None:
    """For each round, wait at the barrier, then dispatch this process's proposal of it."""
    from tests.support.processes import setup_child

    setup_child(env)
    from django.db import connection
    from django.utils import timezone

    from dispatch.models import Principal
    from dispatch.services.dispatcher import proposal_dispatch
    from protocols.denials import Denial

    principal = Principal.objects.get(id=principal_id)
    for number, proposals in enumerate(rounds):
        proposal_id = proposals[index % len(proposals)]
        barrier.wait(timeout=60)
        try:
            proposal_dispatch(principal=principal, proposal_id=proposal_id, now=timezone.now(),
                              enqueue=False)
            outcome = "won"
        except Denial as denial:
            outcome = denial.code.value
        except Exception as exc:  # reported to the parent, which fails the test
            outcome = f"error: {type(exc).__name__}: {exc}"
        results.put((number, index, proposal_id, outcome))
    connection.close()
