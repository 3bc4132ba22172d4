"""Cross-process races of idempotent intake over REST (docs/rest-api.md#proposal, `call_id`).

Two OS processes, each with its own connection, POST a proposal under the same call id at the
same moment, 20 rounds, with and without an execution id. The database's unique constraint
decides the winner; the loser is still compared with it: another body is `proposal_mismatch`,
never a second proposal and never a silent 200 of the other body.
"""

from __future__ import annotations

import multiprocessing
from collections import defaultdict
from datetime import datetime
from typing import Any

import pytest

from dispatch.models import Proposal
from tests.conftest import make_world
from tests.support.processes import child_env
from tests.support.race import intake_racer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PROCESSES = 2
ROUNDS = 20


def transfer(number: int, amount: str) -> dict[str, Any]:
    body: dict[str, Any] = {"operation": "payments.transfer", "call_id": f"race-{number}",
                            "arguments": {"from_account": "acct-001", "to_account": "acct-999",
                                          "amount": amount, "currency": "EUR"}}
    if number % 2 == 0:  # even rounds in one execution, odd ones scoped to the principal
        body["execution_id"] = "exe-race"
    return body


def run_race(token: str, rounds: list[list[dict[str, Any]]]) -> dict[int, list[tuple[Any, ...]]]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    results = ctx.Queue()
    env = child_env()
    procs = [ctx.Process(target=intake_racer, args=(env, token, rounds, barrier, results, i))
             for i in range(PROCESSES)]
    for proc in procs:
        proc.start()
    by_round: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for _ in range(PROCESSES * len(rounds)):
        number, index, outcome = results.get(timeout=300)
        by_round[number].append((index, *outcome))
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return by_round


def test_racing_bodies_under_one_call_id_one_wins_the_other_is_a_mismatch(
    now: datetime,
) -> None:
    world = make_world(now)
    rounds = [[transfer(n, "1.00"), transfer(n, "2.00")] for n in range(ROUNDS)]

    by_round = run_race(world.owner_token, rounds)

    for number, outcomes in sorted(by_round.items()):
        answers = sorted((status, found) for _, status, found in outcomes)
        assert [status for status, _ in answers] == [201, 409], (number, answers)
        assert answers[1][1] == "proposal_mismatch", (number, answers)
        [winner] = [index for index, status, _ in outcomes if status == 201]
        [made] = Proposal.objects.filter(call_id=f"race-{number}")
        assert made.id == answers[0][1]
        assert made.arguments["amount"] == rounds[number][winner]["arguments"]["amount"]
    assert Proposal.objects.count() == ROUNDS


def test_racing_identical_bodies_one_201_one_200_of_the_same_proposal(now: datetime) -> None:
    world = make_world(now)
    rounds = [[transfer(n, "1.00")] for n in range(ROUNDS)]

    by_round = run_race(world.owner_token, rounds)

    for number, outcomes in sorted(by_round.items()):
        answers = sorted((status, found) for _, status, found in outcomes)
        assert [status for status, _ in answers] == [200, 201], (number, answers)
        assert answers[0][1] == answers[1][1], (number, answers)
        assert Proposal.objects.filter(call_id=f"race-{number}").get().id == answers[0][1]
    assert Proposal.objects.count() == ROUNDS
