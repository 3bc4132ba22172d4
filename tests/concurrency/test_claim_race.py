"""Cross-process claim races on the real database (SQLite file or PostgreSQL).

Eight OS processes, each with its own connection, race through the service layer for 100
rounds. Exactly one wins each round; every loser is told why, and no round double-claims.
"""

from __future__ import annotations

import multiprocessing
from collections import Counter, defaultdict
from datetime import datetime

import pytest

from dispatch.models import AuditEvent, Operation, Permit
from tests.conftest import World, make_world
from tests.support.processes import child_env
from tests.support.race import racer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PROCESSES = 8
ROUNDS = 100


def run_race(world: World, rounds: list[list[str]]) -> dict[int, list[tuple[str, str]]]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    results = ctx.Queue()
    env = child_env()
    procs = [ctx.Process(target=racer, args=(env, world.owner.id, rounds, barrier, results, i))
             for i in range(PROCESSES)]
    for proc in procs:
        proc.start()
    by_round: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for _ in range(PROCESSES * len(rounds)):
        number, _index, proposal_id, outcome = results.get(timeout=300)
        by_round[number].append((proposal_id, outcome))
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return by_round


def test_one_permit_one_winner_per_round(now: datetime, settings: object) -> None:
    world = make_world(now)
    rounds = [[world.approved_email()[0].id] for _ in range(ROUNDS)]

    by_round = run_race(world, rounds)

    for number, outcomes in by_round.items():
        tally = Counter(outcome for _, outcome in outcomes)
        assert tally == {"won": 1, "permit_claimed": PROCESSES - 1}, (number, tally)
    assert Operation.objects.count() == ROUNDS
    assert Permit.objects.filter(state="claimed").count() == ROUNDS
    assert AuditEvent.objects.filter(kind="permit.claimed").count() == ROUNDS


def test_two_permits_on_one_revision_one_winner(now: datetime) -> None:
    world = make_world(now)
    rounds = []
    for _ in range(ROUNDS):
        draft = world.draft()
        pair = [world.propose_email(draft), world.propose_email(draft)]
        for proposal in pair:
            world.grant(proposal)
        rounds.append([p.id for p in pair])

    by_round = run_race(world, rounds)

    for number, outcomes in by_round.items():
        tally = Counter(outcome for _, outcome in outcomes)
        assert tally["won"] == 1, (number, tally)
        assert set(tally) <= {"won", "permit_claimed", "protocol_state_invalid"}, tally
    # The losing permit's claim rolled back with its failed compare-and-swap.
    assert Permit.objects.filter(state="claimed").count() == ROUNDS
    assert Permit.objects.filter(state="issued").count() == ROUNDS
    assert Operation.objects.count() == ROUNDS
