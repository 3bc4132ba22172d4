"""Two OS processes publishing the same approved report (docs/design.md#claim): one claim wins,
whatever the interleaving, and the publisher holds one publication. As for email, the report's
revision is the compare-and-swap: two approved publications of one attested revision cannot both
move it to `dispatching`, and eight claimants of one publication's permit get one operation."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import pytest

from demo.destinations.runner import list_all
from dispatch.models import Operation, Permit
from dispatch.services.worker import operation_execute
from tests.concurrency.test_claim_race import run_race
from tests.conftest import make_world
from tests.support.destinations import Destinations
from tests.support.research import Researcher

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROUNDS = 4


def test_one_publication_of_an_approved_report_across_processes(
    now: datetime, destinations: Destinations,
) -> None:
    world = make_world(now)
    researcher = Researcher.enrol(world, destinations.sources_url)
    rounds = []
    for _ in range(ROUNDS):
        report, attestation = researcher.attested_report()
        # Two approved publications of one revision, and every process racing one of them.
        pair = [researcher.propose_publication(report, attestation) for _ in range(2)]
        for proposal in pair:
            world.grant(proposal)
        rounds.append([p.id for p in pair])
    world.owner = researcher.agent  # the racers dispatch as the proposals' principal

    by_round = run_race(world, rounds)

    for number, outcomes in by_round.items():
        tally = Counter(outcome for _, outcome in outcomes)
        assert tally["won"] == 1, (number, tally)
        assert set(tally) <= {"won", "permit_claimed", "protocol_state_invalid"}, tally
    assert Permit.objects.filter(state="claimed").count() == ROUNDS
    operations = Operation.objects.filter(operation="report.publish")
    assert operations.count() == ROUNDS
    for operation in operations:
        assert operation_execute(operation_id=operation.id).state == "completed"
    published = list_all(destinations.directory)["publications"]
    assert sorted(p["key"] for p in published) == sorted(o.id for o in operations)
    assert len({p["report_id"] for p in published}) == ROUNDS  # one per report
