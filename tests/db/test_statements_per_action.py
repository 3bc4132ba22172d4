"""What one action costs the store on the 2-commit path (docs/design.md#write-transactions): a
`dispatch_on_approval` grant's worker claims and starts attempt 1 in one transaction, runs the
handler, and records the outcome in a second. The statements of that action are pinned per
backend, so a statement added to the hot path is a decision someone makes in this file; and
what a statement saved must not cost is checked beside it: an agent's webhook endpoints, added
or removed while the handler runs, are the ones the outcome tells."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import demo.handlers
from dispatch.models import Notification, Operation
from dispatch.services.runs import proposal_run_approved
from dispatch.services.webhooks import webhook_delete, webhook_register
from tests.conftest import World

pytestmark = pytest.mark.django_db

#: The statements of one action on the 2-commit path, an agent without webhooks and outside any
#: workflow run, per backend (savepoints, which stand for BEGIN and COMMIT inside the test's
#: transaction, not counted): the principal; the claim's reads (the proposal with its approval
#: and permit, the revision, the grant chain, the tenant's pauses), its writes (the permit, the
#: draft, the operation, its audit row (on PostgreSQL one CTE with the operation), the budget's
#: counters), the run's execution, attempt 1 with its audit row (on PostgreSQL one CTE); the
#: cancellation probe before the effect; the outcome, its attempt's end and audit row (on
#: PostgreSQL one CTE), and the draft's move.
STATEMENTS = {"sqlite": 19, "postgresql": 14}


@pytest.fixture
def no_smtp(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SMTP socket skipped (the outside world), as the outside harness skips it."""
    monkeypatch.setattr(demo.handlers, "send_email", lambda *args, **kwargs: None)


#: What runs at the failpoint `attempt.before_outcome` (the handler answered, nothing recorded
#: yet), in the worker's own thread: this module is the test's failpoint injector
#: (`dispatch.failpoints`, `FAILPOINTS`).
_BEFORE_OUTCOME: list[Callable[[], None]] = []


def reached(name: str) -> None:
    if name == "attempt.before_outcome":
        for step in _BEFORE_OUTCOME:
            step()


def payload(name: str, snapshot: dict[str, Any]) -> dict[str, Any]:
    return snapshot


@pytest.fixture
def before_outcome(settings: Any) -> Iterator[list[Callable[[], None]]]:
    """Steps run after the claim committed and the handler answered, before the outcome."""
    settings.FAILPOINTS = __name__
    settings.WEBHOOK_ALLOW_PRIVATE = True  # the endpoints below are on loopback
    try:
        yield _BEFORE_OUTCOME
    finally:
        _BEFORE_OUTCOME.clear()


def granted(world: World) -> str:
    """A proposal granted with `dispatch_on_approval`: the permit issued, not yet claimed."""
    proposal = world.propose_email(world.draft(), dispatch_on_approval=True)
    world.grant(proposal)
    return str(proposal.id)


def run(world: World, proposal_id: str) -> Operation:
    operation = proposal_run_approved(proposal_id=proposal_id, principal_id=world.owner.id)
    assert operation is not None
    assert operation.state == "completed"
    return operation


def test_one_action_on_the_two_commit_path_costs_its_statements(
        world: World, no_smtp: None, django_capture_on_commit_callbacks: Any) -> None:
    run(world, granted(world))  # the first fills the process's caches (runtime, schemas)
    proposal_id = granted(world)
    # What runs once each transaction commits is counted too (run here when the block ends).
    with (CaptureQueriesContext(connection) as seen,
          django_capture_on_commit_callbacks(execute=True)):
        run(world, proposal_id)
    texts = [q["sql"] for q in seen.captured_queries]
    transactions = [t for t in texts if t.startswith("SAVEPOINT")]
    statements = [t for t in texts if not t.startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]
    listing = "\n".join(t[:160] for t in statements)
    assert len(transactions) == 2, listing  # the claim with attempt 1; the outcome
    # An agent without webhooks: nothing asks for its endpoints.
    assert not [t for t in statements if t.lstrip().startswith("SELECT")
                and "dispatch_webhookendpoint" in t.split("FROM", 1)[1][:40]], listing
    assert len(statements) == STATEMENTS[connection.vendor], listing


def test_an_endpoint_registered_while_the_handler_runs_hears_the_outcome(
        world: World, no_smtp: None, before_outcome: list[Callable[[], None]]) -> None:
    proposal_id = granted(world)
    added: list[str] = []
    before_outcome.append(lambda: added.append(webhook_register(
        principal=world.owner, url="http://127.0.0.1:9/hook", events=["operation.completed"],
        now=world.now).endpoint.id))
    operation = run(world, proposal_id)
    assert len(added) == 1  # registered after the claim, before the outcome
    told = Notification.objects.filter(proposal_id=proposal_id, event="operation.completed")
    assert [(n.endpoint_id, n.payload["data"]["operation_id"]) for n in told] == [
        (added[0], operation.id)]


def test_an_endpoint_deleted_while_the_handler_runs_hears_nothing(
        world: World, no_smtp: None, before_outcome: list[Callable[[], None]]) -> None:
    kept = webhook_register(principal=world.owner, url="http://127.0.0.1:9/kept",
                            events=["operation.completed"], now=world.now).endpoint
    gone = webhook_register(principal=world.owner, url="http://127.0.0.1:9/gone",
                            events=["operation.completed"], now=world.now).endpoint
    proposal_id = granted(world)

    def delete() -> None:
        webhook_delete(principal=world.owner, endpoint_id=gone.id, now=world.now)

    before_outcome.append(delete)
    run(world, proposal_id)
    told = Notification.objects.filter(proposal_id=proposal_id, event="operation.completed")
    assert [n.endpoint_id for n in told] == [kept.id]


def test_an_endpoint_of_another_event_hears_nothing(
        world: World, no_smtp: None, before_outcome: list[Callable[[], None]]) -> None:
    webhook_register(principal=world.owner, url="http://127.0.0.1:9/other",
                     events=["operation.unknown"], now=world.now)
    proposal_id = granted(world)
    run(world, proposal_id)
    assert not Notification.objects.filter(proposal_id=proposal_id).exclude(
        event__startswith="approval.").exists()
