"""How far recording an outcome wanders (tests/support/callpath.py): the modules the calls of
`operation_move` and of the worker's `operation_execute` visit through our own code, and the
arrows by which they come back to a module already visited. The limits are today's figures and
only go down; the goal is a path that reads top to bottom (docs/architecture.md, "One
proposal's path")."""

from __future__ import annotations

import pytest
from django.db import connection

from dispatch.models import Operation
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.operations import operation_move
from dispatch.services.proposals import proposal_create
from dispatch.services.worker import operation_execute
from protocols.lifecycle import OperationEvent
from tests.conftest import World
from tests.support.callpath import Walk, follow

pytestmark = pytest.mark.django_db

#: (modules visited, returns) at most. On PostgreSQL the worker's run also share-locks its run
#: tree's rows (`dispatch.store.executions`): one module and one return more.
MOVE_LIMIT = (16, 3)
EXECUTE_LIMIT = {"sqlite": (27, 13), "postgresql": (28, 14)}


def within(walk: Walk, limit: tuple[int, int]) -> bool:
    return len(walk.visits) <= limit[0] and len(walk.returns) <= limit[1]


def claimed_email(world: World) -> Operation:
    proposal, _ = world.approved_email()
    return proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                             enqueue=False)


def claimed_lookup(world: World) -> Operation:
    proposal = proposal_create(principal=world.owner, operation="crm.lookup",
                               arguments={"customer_id": "cus-001"}, now=world.now)
    return proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                             enqueue=False)


# Each test measures the second of two actions: the first fills the process's caches (the
# runtime, the compiled schemas, the statements), which other tests may or may not have
# filled already, so the walk is the steady one whatever ran before.


def test_an_outcome_move_wanders_no_further(world: World) -> None:
    operation_move(claimed_email(world), OperationEvent.FAIL_NO_EFFECT, attempt=0,
                   now=world.now, actor="test")
    operation = claimed_email(world)
    moved, walk = follow(lambda: operation_move(
        operation, OperationEvent.FAIL_NO_EFFECT, attempt=0, now=world.now, actor="test"),
        root="dispatch.services.operations:operation_move")
    assert moved
    assert "dispatch.services.resources" in walk.visits  # the draft moved with it
    assert within(walk, MOVE_LIMIT), str(walk)


def test_a_workers_run_wanders_no_further(world: World) -> None:
    operation_execute(operation_id=claimed_lookup(world).id)
    operation = claimed_lookup(world)
    done, walk = follow(lambda: operation_execute(operation_id=operation.id),
                        root="dispatch.services.worker:operation_execute")
    assert done.state == "completed"
    assert within(walk, EXECUTE_LIMIT[connection.vendor]), str(walk)
