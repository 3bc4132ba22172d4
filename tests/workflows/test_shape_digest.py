"""The workflow's shape digest is `canon/1` of its IR without positions, and refuses what
`canon/1` cannot encode (docs/workflows.md "Durability and resumption")."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatch.runtime import get_runtime
from dispatch.workflows import WorkflowRefused, run_workflow, shape_digest
from dispatch.workflows.shape import _shape
from protocols.canonical import CanonicalizationError, digest
from protocols.workflow import CheckedWorkflow, WorkflowBuilder, check_workflow, parse_workflow
from protocols.workflow.ir import Workflow
from tests.conftest import World

REFUND = Path(__file__).parent / "ok" / "refund_email.yaml"


def parsed(text: str) -> Workflow:
    workflow = parse_workflow(text, filename="refund_email.yaml")
    assert isinstance(workflow, Workflow), workflow
    return workflow


def test_the_digest_is_canon_1_of_the_shape_and_ignores_positions() -> None:
    text = REFUND.read_text(encoding="utf-8")
    workflow = parsed(text)
    assert shape_digest(workflow) == digest(_shape(workflow))
    moved = parsed("# a comment moves every line\n\n" + text)
    assert moved.steps[0].span.line != workflow.steps[0].span.line
    assert shape_digest(moved) == shape_digest(workflow)
    renamed = parsed(text.replace("bind: outcome", "bind: result"))
    assert shape_digest(renamed) != shape_digest(workflow)


def test_sets_and_numbers_have_one_encoding() -> None:
    one = WorkflowBuilder("w", effects={"read", "human"}).let("x", {"a": [1, 2.0]}).build()
    other = WorkflowBuilder("w", effects=["human", "read"]).let("x", {"a": [1, 2]}).build()
    assert _shape(one)["effects"] == ["human", "read"]  # sorted by canonical bytes
    assert shape_digest(one) == shape_digest(other)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {1: "non-string key"},
                                   {"$int": "1"}, object()])
def test_what_canon_1_cannot_encode_is_refused(value: object) -> None:
    workflow = WorkflowBuilder("w").let("x", value).build()
    with pytest.raises(CanonicalizationError) as refused:
        shape_digest(workflow)
    assert refused.value.pointer.startswith("/steps/0/value/value")


@pytest.mark.django_db
def test_a_run_of_a_workflow_it_cannot_digest_is_refused_before_any_step(world: World) -> None:
    checked = check_workflow(WorkflowBuilder("nan").let("x", float("nan")).build(),
                             get_runtime().registry, grants=None)
    assert isinstance(checked, CheckedWorkflow)
    with pytest.raises(WorkflowRefused) as refused:
        run_workflow(checked, principal=world.owner, now=world.now)
    assert refused.value.code == "malformed_request"
    assert "/steps/0/value/value" in refused.value.message


@pytest.mark.django_db
def test_an_execution_journaled_under_another_shape_digest_is_not_resumed(world: World) -> None:
    from dispatch.models import TranscriptEntry
    from tests.workflows.test_workflow_runtime import checked

    workflow = checked(REFUND)
    first = run_workflow(workflow, principal=world.owner, inputs={"draft": world.draft().id},
                         now=world.now)
    assert first.state == "waiting"
    header = TranscriptEntry.objects.get(execution_id=first.execution_id, call_id="workflow")
    # What the journal of a run started before the digest was canon/1 holds.
    header.payload = {**header.payload, "shape": "sha256:" + "0" * 64}
    header.save(update_fields=["payload"])
    with pytest.raises(WorkflowRefused) as refused:
        run_workflow(workflow, principal=world.owner, execution_id=first.execution_id,
                     now=world.now)
    assert refused.value.code == "execution_mismatch"
