"""The demo ships one HTTP action (docs/actions.md): `demo/actions/helpdesk.yaml`, a helpdesk
ticket opened in the demo destinations' helpdesk (`/tickets` on the bank's port). Its file passes
`manage.py check_actions`; compose reads the same action with the destinations' host; and the
action runs end to end against the real destinations process, which verifies the permit token,
deduplicates on the key and answers the lookup."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from demo.destinations.helpdesk import list_tickets, lookup_ticket
from dispatch.runtime import get_runtime
from tests.support.compose import from_image
from tests.support.destinations import Destinations
from tests.support.processes import python_path

ROOT = Path(__file__).resolve().parents[2]
ACTIONS = ROOT / "demo" / "actions"
LOCAL = ACTIONS / "helpdesk.yaml"
COMPOSED = ACTIONS / "compose" / "helpdesk.yaml"


def without_comments(path: Path) -> str:
    return "".join(line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
                   if not line.startswith("#"))


@pytest.mark.parametrize(("path", "allowed"), [(LOCAL, "127.0.0.1"), (COMPOSED, "destinations")])
def test_the_demo_action_files_pass_check_actions(path: Path, allowed: str,
                                                  settings: Any) -> None:
    # As scripts/run.sh and compose set it: the destinations' host is allowed (a loopback
    # address is refused when the file is read otherwise; a name, when it is resolved).
    settings.ACTIONS_ALLOWED_HOSTS = []
    if allowed == "127.0.0.1":
        with pytest.raises(CommandError):
            call_command("check_actions", str(path), stdout=StringIO())
    settings.ACTIONS_ALLOWED_HOSTS = [allowed]
    out = StringIO()
    call_command("check_actions", str(path), stdout=out)
    assert out.getvalue().splitlines() == [f"{path}: ok: tickets.create version 1"]


def test_a_process_with_the_composes_actions_dir_passes_check_actions() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    env = compose["x-app-environment"]
    folder = from_image(env["ACTIONS_DIR"].removeprefix("${ACTIONS_DIR:-").removesuffix("}"))
    assert Path(folder) == COMPOSED.parent
    assert "destinations" in env["ACTIONS_ALLOWED_HOSTS"]
    result = subprocess.run(
        [sys.executable, "manage.py", "check_actions"], cwd=ROOT, capture_output=True,
        text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": python_path(), "ACTIONS_DIR": folder,
             "ACTIONS_ALLOWED_HOSTS": "destinations",
             "DJANGO_SETTINGS_MODULE": "config.test_settings"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok: tickets.create version 1")


def test_composes_action_is_the_demo_action_at_the_destinations_host() -> None:
    assert without_comments(COMPOSED) == without_comments(LOCAL).replace(
        "http://127.0.0.1:8026", "http://destinations:8026")


@pytest.fixture
def demo_action(tmp_path: Path, settings: Any, destinations: Destinations) -> Path:
    """`ACTIONS_DIR` holding the demo's file, pointed at the running destinations' port."""
    folder = tmp_path / "actions"
    folder.mkdir()
    (folder / "helpdesk.yaml").write_text(LOCAL.read_text(encoding="utf-8").replace(
        "http://127.0.0.1:8026", destinations.bank_url), encoding="utf-8")
    settings.ACTIONS_DIR = str(folder)
    settings.ACTIONS_ALLOWED_HOSTS = ["127.0.0.1"]
    get_runtime.cache_clear()
    yield folder
    get_runtime.cache_clear()


@pytest.mark.django_db
def test_the_demo_action_opens_one_verified_ticket_in_the_demo_helpdesk(
        demo_action: Path, destinations: Destinations, now: datetime) -> None:
    from dispatch.services.approvals import approval_decide
    from dispatch.services.authority import grant_issue
    from dispatch.services.dispatcher import proposal_dispatch
    from dispatch.services.principals import agent_create, human_create
    from dispatch.services.proposals import proposal_create
    from dispatch.services.worker import operation_execute

    agent, _ = agent_create(name="helper", tenant="acme", tools=["tickets.create"])
    operator, _ = human_create(name="lead", tenant="acme", role="operator", password="pw")
    grant_issue(issuer="admin", subject=agent, operations=["tickets.create"],
                scope={"queue": ["billing"]}, now=now - timedelta(minutes=1))
    proposal = proposal_create(principal=agent, operation="tickets.create",
                               arguments={"queue": "billing", "subject": "Refund order 42"},
                               now=now)
    approval_decide(approver=operator, approval_id=proposal.approval.id, decision="grant",
                    digest=proposal.digest, now=now)
    operation = proposal_dispatch(principal=agent, proposal_id=proposal.id, now=now,
                                  enqueue=False)
    operation = operation_execute(operation_id=operation.id)
    operation.refresh_from_db()

    assert operation.state == "completed", operation.attempts.last().error
    ticket = lookup_ticket(destinations.directory, operation.id)
    assert ticket is not None
    assert (ticket["queue"], ticket["subject"]) == ("billing", "Refund order 42")
    assert operation.result == ticket
    # The action's lookup: present for this operation, absent for another key.
    tickets = f"{destinations.bank_url}/tickets"
    assert httpx.get(f"{tickets}/{operation.id}").status_code == 200
    assert httpx.get(f"{tickets}/op_unknown").status_code == 404
    # Without a permit token, or with one for another key, nothing is recorded.
    body = {"queue": "billing", "subject": "forged"}
    assert httpx.post(tickets, json=body, headers={"Idempotency-Key": "op_x"}).status_code == 403
    assert httpx.post(tickets, json=body, headers={
        "Idempotency-Key": "op_x", "Authorization": "Bearer not.a.token"}).status_code == 403
    assert [t["key"] for t in list_tickets(destinations.directory)] == [operation.id]


@pytest.mark.django_db
def test_the_seeded_agent_may_open_tickets_when_the_action_is_loaded(
        demo_action: Path, destinations: Destinations, tmp_path: Path, now: datetime) -> None:
    from demo.seed import seed
    from dispatch.models import Grant, Principal

    seed(token_file=tmp_path / "token", proposals=False, agents=False,
         sources_url=destinations.sources_url, now=now)

    agent = Principal.objects.get(name="support-bot")
    assert "tickets.create" in agent.tools
    [grant] = [g for g in Grant.objects.filter(subject=agent)
               if "tickets.create" in g.operations]
    assert grant.scope == {"queue": ["billing", "support"]}
