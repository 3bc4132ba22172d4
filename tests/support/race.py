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


def intake_racer(env: dict[str, str], token: str, rounds: list[list[dict[str, Any]]],
                 barrier: Any, results: Any, index: int) -> None:
    """For each round, wait at the barrier, then POST this process's body of it to
    `proposals/` through the whole Django stack (middleware, DRF, service, database)."""
    import json

    from tests.support.processes import setup_child

    setup_child(env)
    from django.db import connection
    from django.test import Client

    client = Client(HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Bearer {token}")
    for number, bodies in enumerate(rounds):
        body = bodies[index % len(bodies)]
        barrier.wait(timeout=60)
        try:
            response = client.post("/api/v1/proposals/", data=json.dumps(body),
                                   content_type="application/json")
            answer = response.json()
            found = answer.get("id") or answer["error"]["code"]
            outcome = (response.status_code, found)
        except Exception as exc:  # reported to the parent, which fails the test
            outcome = (0, f"error: {type(exc).__name__}: {exc}")
        results.put((number, index, outcome))
    connection.close()
