"""A worker killed (SIGKILL) in the middle of a delegated workflow step (docs/design.md#delegation):
its child grant does not outlive the step. Reconciliation revokes it once the step's lease lapses,
and the sub-agent can do nothing more; a run resumed afterwards never issues a second child grant.
Across OS processes, on the real database (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from dispatch.agent import ScriptedAdapter
from dispatch.models import BudgetCounter, Grant, Operation, Proposal
from dispatch.services.delegations import reconcile_delegations
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.proposals import proposal_create
from dispatch.workflows import run_workflow
from protocols.denials import Denial
from tests.conftest import World
from tests.support.delegation import (
    AGENT,
    checked,
    delegated_workflow,
    lookup,
    only_delegation,
    script,
)
from tests.support.paused import PausedChild

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SCRIPT = script(lookup(), lookup(), final={"tier": "gold"})


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    workflow, sub_agent = tmp_path / "delegated.yaml", tmp_path / "script.json"
    workflow.write_text(delegated_workflow())
    sub_agent.write_text(json.dumps(SCRIPT))
    return workflow, sub_agent


def killed_mid_step(world: World, tmp_path: Path, files: tuple[Path, Path],
                    **env: str) -> None:
    """Run the workflow in a child process, stop it inside the delegated step (the sub-agent's
    first proposal committed, its result not yet recorded) and SIGKILL it there."""
    workflow, sub_agent = files
    with PausedChild(tmp_path, "workflow", world.owner.id, str(workflow),
                     f"{AGENT}={sub_agent}", pause="agent.after_proposal", **env) as child:
        child.reached()
        child.proc.kill()
        child.proc.wait(timeout=30)


def resume(world: World, files: tuple[Path, Path]) -> tuple[str, str | None]:
    workflow, _ = files
    delegation = only_delegation()
    run = run_workflow(checked(workflow.read_text()), principal=world.owner,
                       execution_id=delegation.execution_id,
                       agents={AGENT: ScriptedAdapter(SCRIPT)})
    return run.state, run.denial.code if run.denial else None


def test_reconciliation_revokes_the_child_grant_of_a_killed_step(
    world: World, tmp_path: Path, files: tuple[Path, Path],
) -> None:
    killed_mid_step(world, tmp_path, files)
    delegation = only_delegation()
    sub = delegation.principal
    assert delegation.ended_at is None and delegation.grant.revoked_at is None
    # While the lease runs, the worker may be alive (a slow turn): nothing is revoked.
    assert reconcile_delegations(now=timezone.now()) == 0
    lapsed = timezone.now() + timedelta(seconds=settings.DELEGATION_LEASE_SECONDS + 1)
    assert reconcile_delegations(now=lapsed) == 1
    delegation.refresh_from_db()
    assert delegation.end_reason == "lease_lapsed"
    assert Grant.objects.get(id=delegation.grant_id).revoked_at is not None
    # The whole carve-out went back to the run: the killed sub-agent had spent nothing.
    run_counter = f"execution:{world.owner.id}:{delegation.execution_id}"
    assert BudgetCounter.objects.get(key=run_counter).used == 0
    # Whatever the sub-agent tries later is refused: its proposal made before the kill ...
    made = Proposal.objects.get(principal=sub)
    with pytest.raises(Denial) as refused:
        proposal_dispatch(principal=sub, proposal_id=made.id, now=timezone.now(),
                          enqueue=False)
    assert refused.value.code.value == "authority_revoked"
    # ... and any new one.
    with pytest.raises(Denial) as refused:
        proposal_create(principal=sub, operation="crm.lookup",
                        arguments={"customer_id": "cus-001"}, now=timezone.now())
    assert refused.value.code.value == "authority_revoked"
    assert not Operation.objects.exists()
    # Running the execution again replays the step's end: no second child grant.
    assert resume(world, files) == ("denied", "authority_revoked")
    assert Grant.objects.filter(parent__isnull=False).count() == 1
    assert reconcile_delegations(now=lapsed) == 0


def test_a_run_resumed_before_reconciliation_takes_the_step_over_under_the_same_grant(
    world: World, tmp_path: Path, files: tuple[Path, Path],
) -> None:
    killed_mid_step(world, tmp_path, files, DELEGATION_LEASE_SECONDS="1")
    time.sleep(1.2)  # the dead worker's lease lapses
    assert resume(world, files) == ("finished", None)
    delegation = only_delegation()
    assert delegation.end_reason == "finished"
    assert delegation.grant.revoked_at is not None
    assert Grant.objects.filter(parent__isnull=False).count() == 1
    # The proposal made before the kill was resumed, not made again (docs/design.md#outcomes).
    assert Proposal.objects.filter(principal=delegation.principal).count() == 2
    assert Operation.objects.filter(state="completed").count() == 2
