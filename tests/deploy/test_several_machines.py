"""Several machines (docs/deployment.md): 2 web processes, 2 workers and 2 beat-free
reconcilers on one PostgreSQL and one Redis, no shared disk, each process in a working directory
of its own, started from docker-compose.yml's own commands and environment
(tests/support/compose.py).

- Both webs are asked to dispatch the same approved proposal at the same moment: one wins, the
  other is refused, and the destination sees one effect.
- A worker is SIGKILLed in the middle of an attempt: the outcome does not stay a lie; the
  reconcilers settle it from the destination's own lookup, over the network.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from demo.destinations.runner import list_all
from tests.support.compose import Deployment, Process, answers, deployment, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _postgres_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("several machines share PostgreSQL, not a SQLite file on one disk")


def start_topology(app: Deployment) -> dict[str, Any]:
    app.run("migrate")
    destinations = app.start("destinations")
    wait_for(lambda: "destinations ready" in destinations.output(), 60, "the destinations",
             watch=[destinations])
    webs: list[tuple[Process, str]] = []
    for index in (1, 2):
        # Another machine: its own listening port (the same 8000 on its own host).
        app.net.ports[("web", 8000)] = app.net.port(f"web-{index}", 8000)
        webs.append((app.start("web", name=f"web-{index}"),
                     f"http://127.0.0.1:{app.net.ports[('web', 8000)]}"))
    workers = [app.start("worker", name=f"worker-{index}") for index in (1, 2)]
    reconcilers = [app.start("reconciler", name=f"reconciler-{index}") for index in (1, 2)]
    everyone = [destinations, *(web for web, _ in webs), *workers, *reconcilers]
    for _, url in webs:
        wait_for(lambda url=url: answers(f"{url}/accounts/login/"), 120, f"web at {url}",
                 watch=everyone)
    for worker in workers:
        wait_for(lambda worker=worker: "ready." in worker.output(), 120, worker.name,
                 watch=everyone)
    for reconciler in reconcilers:
        wait_for(lambda reconciler=reconciler: '"unknown"' in reconciler.output(), 120,
                 f"{reconciler.name}'s first pass", watch=everyone)
    # No two processes share a working directory, and none is the checkout.
    directories = {process.directory for process in everyone}
    assert len(directories) == len(everyone)
    assert all(process.env["APP_VAR_DIR"] == str(process.directory) for process in everyone)
    return {"destinations": destinations, "urls": [url for _, url in webs],
            "workers": workers, "everyone": everyone}


def settings_for(app: Deployment, tmp_path: Path) -> dict[str, Any]:
    env = app.environment_of("web", tmp_path / "probe")
    return {"dir": str(tmp_path / "nobody-writes-here"), "bind": "127.0.0.1",
            "smtp_host": env["SMTP_SINK_HOST"], "smtp_port": int(env["SMTP_SINK_PORT"]),
            "smtp_lookup_url": env["SMTP_SINK_LOOKUP_URL"], "bank_url": env["BANK_URL"],
            "publisher_url": env["PUBLISHER_URL"], "sources_url": env["SOURCES_URL"]}


def messages(destinations: Process, message_id: str) -> list[dict[str, Any]]:
    """What the sink recorded under `message_id` (read by the test, the only outside observer)."""
    found = list_all(destinations.directory / "destinations")["email"]
    return [m for m in found if m["message_id"] == message_id]


def topology_connections() -> int:
    """Connections to the test database other than this test's own."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                       " AND pid <> pg_backend_pid()")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def in_flight(worker: Process) -> set[str]:
    """Tasks this worker received and has not finished."""
    log = worker.output()
    received = set(re.findall(r"\[([0-9a-f-]{36})\] received", log))
    finished = set(re.findall(r"\[([0-9a-f-]{36})\] (?:succeeded|failed|raised)", log))
    return received - finished


def claim_at_once(agents: list[Any], proposal_id: str) -> list[Any]:
    """Each agent client (one per web) dispatches `proposal_id` at the same moment; each
    answer is the dispatch's JSON or the refusal."""
    from exact_console import Denied

    start = threading.Barrier(len(agents))
    found: list[Any] = [None] * len(agents)

    def claim(index: int) -> None:
        start.wait()
        try:
            found[index] = agents[index].dispatch(proposal_id)
        except Denied as denied:
            found[index] = denied

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(agents))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    return found


def test_two_webs_two_workers_two_reconcilers_claim_once_and_survive_a_worker_crash(
    tmp_path: Path, settings: Any,
) -> None:
    from dispatch.models import Attempt, Operation
    from exact_console import Client, Denied
    from tests.conftest import make_world

    with deployment(tmp_path / "machines", BROKER_VISIBILITY_TIMEOUT="5") as app:
        topology = start_topology(app)
        settings.DESTINATIONS = settings_for(app, tmp_path)
        world = make_world(timezone.now())
        agents = [Client(url, world.owner_token, timeout=60) for url in topology["urls"]]
        everyone = topology["everyone"]

        # --- Concurrent claims of one proposal, one through each web. ---
        for _ in range(3):
            proposal, _ = world.approved_email()
            answers_ = claim_at_once(agents, proposal.id)
            won = [a for a in answers_ if isinstance(a, dict)]
            lost = [a for a in answers_ if isinstance(a, Denied)]
            assert len(won) == 1 and len(lost) == 1, answers_
            assert lost[0].code == "permit_claimed"
            operation = Operation.objects.get(id=won[0]["operation_id"])
            assert Operation.objects.filter(proposal_id=proposal.id).count() == 1

            def completed(operation: Any = operation) -> bool:
                operation.refresh_from_db()
                return operation.state == "completed"

            wait_for(completed, 90, "the claimed email to complete", watch=everyone)
            assert len(messages(topology["destinations"],
                                f"{operation.id}@console.invalid")) == 1

        # The connection budget (docs/deployment.md): 2 webs x 3 gunicorn workers, 2 workers x 4
        # children, 2 reconcilers x 1; the mcp gateway is not part of this topology.
        assert topology_connections() <= 2 * 3 + 2 * 4 + 2 * 1

        # --- A worker SIGKILLed mid-attempt (the sink has the message and is hanging). ---
        proposal, _ = world.approved_email(to=["someone@hang.test"])
        operation = Operation.objects.get(id=agents[0].dispatch(proposal.id)["operation_id"])
        message_id = f"{operation.id}@console.invalid"
        wait_for(lambda: messages(topology["destinations"], message_id), 60,
                 "the sink to hold the message", watch=everyone)
        busy = [w for w in topology["workers"] if in_flight(w)]
        assert len(busy) == 1, [w.output()[-2000:] for w in topology["workers"]]
        crashed = busy[0]
        crashed.kill()
        survivors = [p for p in everyone if p is not crashed]
        operation.refresh_from_db()
        assert operation.state == "claimed"  # nothing settled it on the way down

        def honest() -> bool:
            operation.refresh_from_db()
            return operation.state == "reconciled_completed"

        # The redelivered task does nothing (an email is never sent twice); past the contract's
        # timeout a reconciler makes it unknown, looks it up at the sink over HTTP: present.
        wait_for(honest, 120, "the reconcilers to settle the crashed attempt", watch=survivors)
        assert "SMTP sink holds message" in operation.evidence
        assert Attempt.objects.filter(operation=operation).count() == 1
        assert len(messages(topology["destinations"], message_id)) == 1
        for agent in agents:
            agent.close()
