"""Adapters resume exactly (docs/design.md#outcomes): the adapter's configuration is persisted with
the execution, and a resume under another script or model configuration is refused before the
model is asked anything, rather than regenerating the execution's actions."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from dispatch.agent import ResumeRefusedError, ScriptedAdapter, execution_open, execution_run
from dispatch.models import Execution, Proposal, TranscriptEntry
from tests.conftest import MAILBOX, World

pytestmark = pytest.mark.django_db

DRAFT = {"kind": "email_draft", "payload": {"from": MAILBOX, "to": ["ada@example.com"],
                                            "subject": "Renewal", "body": "Confirmed."}}
SCRIPT: dict[str, Any] = {"agent": "owner", "steps": [
    {"call": "resources.create", "name": "reply", "arguments": DRAFT},
    {"call": "email.send", "arguments": {"draft": {"$result": "reply"}}},
    {"final": "sent"}]}


def waiting(world: World) -> Execution:
    adapter = ScriptedAdapter(SCRIPT)
    execution = execution_open(principal=world.owner, adapter=adapter, now=world.now)
    assert execution_run(execution_id=execution.id, adapter=adapter).state == "waiting"
    execution.refresh_from_db()
    return execution


def test_the_configuration_is_persisted_with_the_execution(world: World) -> None:
    execution = waiting(world)
    assert execution.adapter_config == {"script": SCRIPT}
    assert execution.adapter_fingerprint.startswith("sha256:")
    # What was persisted rebuilds the same adapter, which resumes.
    rebuilt = ScriptedAdapter(execution.adapter_config["script"])
    assert execution_run(execution_id=execution.id, adapter=rebuilt).state == "waiting"


def test_a_changed_script_refuses_to_resume(world: World) -> None:
    execution = waiting(world)
    entries = TranscriptEntry.objects.filter(execution_id=execution.id).count()
    changed = json.loads(json.dumps(SCRIPT))
    changed["steps"][1]["arguments"] = {"draft": {"id": "res_other", "revision": 1}}
    with pytest.raises(ResumeRefusedError, match="another scripted configuration"):
        execution_run(execution_id=execution.id, adapter=ScriptedAdapter(changed))
    assert TranscriptEntry.objects.filter(execution_id=execution.id).count() == entries
    assert Proposal.objects.filter(execution_id=execution.id).count() == 1


def test_run_agent_refuses_a_resume_under_another_script(world: World, tmp_path: Path) -> None:
    execution = waiting(world)
    changed = {**SCRIPT, "steps": [*SCRIPT["steps"][:2], {"final": "something else"}]}
    path = tmp_path / "script.json"
    path.write_text(json.dumps(changed))
    with pytest.raises(CommandError, match=f"execution {execution.id} was started with "
                                           "another scripted configuration"):
        call_command("run_agent", str(path), "--execution", execution.id, "--inline",
                     stdout=StringIO())
