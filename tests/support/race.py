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


def delegate_or_revoke(env: dict[str, str], role: str, owner_id: str, admin_id: str,
                       parents: list[str], scope: dict[str, Any], barrier: Any,
                       results: Any) -> None:
    """One side of the delegation race: each round, delegate from or revoke one parent."""
    from tests.support.processes import setup_child

    setup_child(env)
    from django.db import connection
    from django.utils import timezone

    from dispatch.models import Principal
    from dispatch.services.authority import grant_delegate, grant_revoke
    from protocols.denials import Denial

    actor = Principal.objects.get(id=owner_id if role == "delegate" else admin_id)
    for parent in parents:
        barrier.wait(timeout=60)
        try:
            if role == "delegate":
                grant_delegate(actor=actor, grant_id=parent, subject_name="colleague",
                               operations=["email.send"], scope=scope,
                               expires_at=None, now=timezone.now())
            else:
                grant_revoke(actor=actor, grant_id=parent, now=timezone.now())
            results.put((role, "ok"))
        except Denial as denial:
            results.put((role, denial.code.value))
        except Exception as exc:  # reported to the parent, which fails the test
            results.put((role, f"error: {type(exc).__name__}: {exc}"))
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
