"""`POST executions/{id}/input/` (docs/rest-api.md#calls, docs/workflows.md#waiting-steps): the
answer of a parked `receive` or `approve` step, once; never an approval's decision."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dispatch.models import AuditEvent, WorkflowWait
from dispatch.runtime import get_runtime
from dispatch.workflows import WorkflowRun, run_workflow
from protocols.workflow import CheckedWorkflow, check_source
from tests.api.conftest import Caller, assert_error
from tests.conftest import World

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "tests" / "workflows" / "runtime"


def start(world: World, path: Path, **inputs: str) -> WorkflowRun:
    text = path.read_text(encoding="utf-8")
    checked = check_source(text, get_runtime().registry, filename=str(path))
    assert isinstance(checked, CheckedWorkflow), checked
    return run_workflow(checked, principal=world.owner, inputs=inputs or None,
                        source=(text, str(path)))


def test_the_agent_answers_its_receive_step_once(world: World, owner: Caller,
                                                 caller: Callable[[str | None], Caller]) -> None:
    run = start(world, RUNTIME / "receive_then_send.yaml")
    path = f"executions/{run.execution_id}/input/"
    assert_error(caller("outsider").post(path, {"value": {}}), 404, "not_found")
    response = owner.post(path, {"value": {"subject": "hi"}, "step": "steps[0]"})
    assert response.status_code == 200, response.content
    assert response.json() == {"execution_id": run.execution_id, "step": "steps[0]",
                               "waits": "receive", "state": "parked"}
    assert WorkflowWait.objects.get(execution_id=run.execution_id).value == {"subject": "hi"}
    assert AuditEvent.objects.filter(kind="workflow.input", actor="owner").count() == 1
    assert_error(owner.post(path, {"value": 1}), 409, "protocol_state_invalid")
    assert_error(owner.post(path, {}), 422, "schema_invalid")
    assert_error(owner.post("executions/exe_nothing/input/", {"value": 1}), 404, "not_found")


def test_an_approve_step_takes_an_operators_bool(world: World, owner: Caller,
                                                 caller: Callable[[str | None], Caller]) -> None:
    run = start(world, RUNTIME / "approve_gate.yaml", draft=world.draft().id)
    path = f"executions/{run.execution_id}/input/"
    assert_error(owner.post(path, {"value": True}), 403, "role_required")
    assert_error(caller("outsider_operator").post(path, {"value": True}), 404, "not_found")
    assert_error(caller("approver").post(path, {"value": "yes"}), 422, "schema_invalid")
    response = caller("approver").post(path, {"value": False})
    assert response.status_code == 200, response.content
    assert response.json()["waits"] == "approve"


def test_an_approval_is_never_answered_as_input(world: World,
                                                caller: Callable[[str | None], Caller]) -> None:
    run = start(world, ROOT / "docs" / "examples" / "approval_sketch.yaml",
                email_revision=world.draft().id)
    for who in ("owner", "approver", "admin"):
        details = assert_error(
            caller(who).post(f"executions/{run.execution_id}/input/",
                             {"value": {"tag": "Granted", "permit": "prm_forged"}}),
            409, "protocol_state_invalid")
        assert "approval resolver" in details["reason"]
    assert WorkflowWait.objects.get(execution_id=run.execution_id).delivered_at is None
