"""HTTP actions end to end (docs/design.md#http-actions, docs/actions.md): a file in
`ACTIONS_DIR` becomes a contract that is proposed, approved, claimed and sent to a real HTTP
service started here (a threaded `http.server` on loopback), on SQLite and on PostgreSQL.

The service records every request and answers as the test scripts it: `ok` (201 with a ticket),
`refuse` (422), `fail` (503), `lose` (it records the ticket, then drops the connection without
an answer). Its lookup `GET /tickets/{key}` answers 200 for a recorded key, else 404.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from django.test import Client

from dispatch import signing
from dispatch.http_actions import ActionsError
from dispatch.models import Operation
from dispatch.runtime import get_runtime
from dispatch.selectors.contracts import action_summary
from dispatch.services.audit import audit_replay
from exact_console.permits import verify
from tests.permits.test_standard_libraries import DEPLOYMENT, published_jwks, pyjwt_verify

pytestmark = pytest.mark.django_db

LATER = timedelta(seconds=30)  # past the action's 5 s timeout

ACTION = """\
name: tickets.create
version: 1
description: Open a helpdesk ticket.
input_schema:
  type: object
  additionalProperties: false
  required: [queue, subject]
  properties:
    queue: {{type: string, pattern: "^[a-z]+$"}}
    subject: {{type: string, maxLength: 200}}
effects: [external_write]
approval: {{role: operator}}
authority:
  queue: queue
destination:
  name: helpdesk
  url: {base}/tickets
  method: POST
  timeout_s: 5
idempotency: {idempotency}
retries: {retries}
lookup:
  url: {base}/tickets/{{operation_id}}
  present: [200]
  absent: [404]
"""


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Helpdesk:
    """The team's service: what it received, what it recorded, how it answers next."""

    base: str
    script: list[str]
    requests: list[Request] = field(default_factory=list)
    tickets: dict[str, Any] = field(default_factory=dict)

    def next_answer(self) -> str:
        return self.script.pop(0) if len(self.script) > 1 else self.script[0]


@pytest.fixture
def helpdesk() -> Iterator[Helpdesk]:
    service: Helpdesk

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            service.requests.append(Request("POST", self.path, {
                k.lower(): v for k, v in self.headers.items()}, body))
            answer = service.next_answer()
            key = self.headers.get("Idempotency-Key", "")
            if answer in ("ok", "lose"):
                service.tickets.setdefault(key, json.loads(body))
            if answer == "lose":
                self.close_connection = True
                self.connection.shutdown(2)
                return
            status, reply = {"ok": (201, {"ticket": f"T-{len(service.tickets)}", "key": key}),
                             "refuse": (422, {"error": "no such queue"}),
                             "fail": (503, {"error": "busy"})}[answer]
            self.reply(status, reply)

        def do_GET(self) -> None:
            service.requests.append(Request("GET", self.path, dict(self.headers.items()), b""))
            key = self.path.rsplit("/", 1)[-1]
            if key in service.tickets:
                self.reply(200, {"key": key})
            else:
                self.reply(404, {"error": "no ticket"})

        def reply(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    service = Helpdesk(f"http://127.0.0.1:{server.server_address[1]}", ["ok"])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield service
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def _keys(settings: Any) -> Iterator[None]:
    signing.signing_keys.cache_clear()
    settings.SIGNING_KEYS = json.dumps([DEPLOYMENT])
    yield
    signing.signing_keys.cache_clear()


@pytest.fixture
def actions(tmp_path: Path, settings: Any, helpdesk: Helpdesk) -> Iterator[Path]:
    """`ACTIONS_DIR` holding the helpdesk action; its loopback host allowed."""
    folder = tmp_path / "actions"
    folder.mkdir()
    write_action(folder, helpdesk)
    settings.ACTIONS_DIR = str(folder)
    settings.ACTIONS_ALLOWED_HOSTS = ["127.0.0.1"]
    get_runtime.cache_clear()
    yield folder
    get_runtime.cache_clear()


def write_action(folder: Path, helpdesk: Helpdesk, *, idempotency: str = "none",
                 retries: int = 1) -> None:
    (folder / "helpdesk.yaml").write_text(ACTION.format(
        base=helpdesk.base, idempotency=idempotency, retries=retries), encoding="utf-8")
    get_runtime.cache_clear()


def proposed_and_approved(now: datetime, subject: str = "Refund order 42") -> Any:
    from dispatch.services.approvals import approval_decide
    from dispatch.services.authority import grant_issue
    from dispatch.services.principals import agent_create, human_create
    from dispatch.services.proposals import proposal_create

    agent, _ = agent_create(name="helper", tenant="acme", tools=["tickets.create"])
    operator, _ = human_create(name="lead", tenant="acme", role="operator", password="pw")
    grant_issue(issuer="admin", subject=agent, operations=["tickets.create"],
                scope={"queue": ["billing"]}, now=now - timedelta(minutes=1))
    proposal = proposal_create(principal=agent, operation="tickets.create",
                               arguments={"queue": "billing", "subject": subject}, now=now)
    approval_decide(approver=operator, approval_id=proposal.approval.id, decision="grant",
                    digest=proposal.digest, now=now)
    return agent, proposal


def last_error(operation: Operation) -> str:
    return str(operation.attempts.order_by("-number").first().error)


def run(now: datetime, subject: str = "Refund order 42") -> Operation:
    from dispatch.services.dispatcher import proposal_dispatch
    from dispatch.services.worker import operation_execute

    agent, proposal = proposed_and_approved(now, subject)
    operation = proposal_dispatch(principal=agent, proposal_id=proposal.id, now=now,
                                  enqueue=False)
    operation = operation_execute(operation_id=operation.id)
    operation.refresh_from_db()
    return operation


def test_an_approved_action_sends_the_arguments_the_key_and_a_verifiable_token(
        actions: Path, helpdesk: Helpdesk, now: datetime) -> None:
    contract = get_runtime().contract("tickets.create")
    assert contract.destination == "helpdesk"
    operation = run(now)

    assert operation.state == "completed"
    assert operation.result == {"ticket": "T-1", "key": operation.id}
    (request,) = helpdesk.requests
    assert (request.method, request.path) == ("POST", "/tickets")
    assert json.loads(request.body) == {"queue": "billing", "subject": "Refund order 42"}
    assert request.headers["content-type"] == "application/json"
    assert request.headers["idempotency-key"] == operation.id
    scheme, _, token = request.headers["authorization"].partition(" ")
    assert scheme == "Bearer"
    jwks = published_jwks()
    claims = verify(token, jwks, audience="helpdesk", snapshot=operation.proposal.canonical)
    assert claims.operation_id == operation.id
    assert pyjwt_verify(token, jwks, audience="helpdesk")["sub"] == operation.id
    with pytest.raises(Exception, match="another destination"):
        verify(token, jwks, audience="bank")
    # Audited like every contract: the replay of its audit through the tables holds.
    assert not audit_replay().violations


def test_the_action_is_listed_like_every_contract(actions: Path, now: datetime) -> None:
    from dispatch.services.principals import agent_create

    _, token = agent_create(name="reader", tenant="acme", tools=["tickets.create"])
    answer = Client().get("/api/v1/contracts/", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200
    (listed,) = [c for c in answer.json()["results"] if c["name"] == "tickets.create"]
    assert listed["fingerprint"] == get_runtime().contract("tickets.create").fingerprint
    assert listed["idempotency"] == "none"
    # The console's sentence and an admin's way to check come from the file.
    contract = get_runtime().contract("tickets.create")
    assert action_summary("tickets.create", contract, {}).text == (
        "Open a helpdesk ticket (sent to helpdesk).")
    assert get_runtime().how_to_check(contract, "op_1").endswith("/tickets/op_1.")


def test_a_refusal_is_failed_no_effect(actions: Path, helpdesk: Helpdesk, now: datetime) -> None:
    helpdesk.script[:] = ["refuse"]
    operation = run(now)
    assert operation.state == "failed_no_effect"
    assert "422" in last_error(operation)


def test_a_5xx_without_receiver_dedup_is_unknown_and_not_retried(
        actions: Path, helpdesk: Helpdesk, now: datetime) -> None:
    helpdesk.script[:] = ["fail", "ok"]
    operation = run(now)
    assert operation.state == "unknown"
    assert len(helpdesk.requests) == 1


def test_a_5xx_under_receiver_dedup_is_retried_with_the_same_key(
        actions: Path, helpdesk: Helpdesk, now: datetime) -> None:
    write_action(actions, helpdesk, idempotency="receiver_dedup", retries=3)
    helpdesk.script[:] = ["fail", "ok"]
    operation = run(now)
    assert operation.state == "completed"
    assert [r.headers["idempotency-key"] for r in helpdesk.requests] == [operation.id] * 2


def test_a_lost_answer_then_a_lookup_that_proves_presence_ends_completed(
        actions: Path, helpdesk: Helpdesk, now: datetime) -> None:
    from dispatch.services.reconciliation import reconcile_operations

    helpdesk.script[:] = ["lose"]
    operation = run(now)
    assert operation.state == "unknown"
    assert operation.id in helpdesk.tickets  # the effect happened; the answer was lost
    reconcile_operations(now=now + LATER, enqueue=False)
    operation.refresh_from_db()
    assert operation.state == "reconciled_completed"
    assert helpdesk.requests[-1].method == "GET"
    assert helpdesk.requests[-1].path == f"/tickets/{operation.id}"


def test_an_ssrf_target_is_refused_unless_its_host_is_allowed(
        actions: Path, helpdesk: Helpdesk, now: datetime, settings: Any) -> None:
    # Allowed when the runtime was built; no longer at the send: refused, nothing sent.
    get_runtime()
    settings.ACTIONS_ALLOWED_HOSTS = []
    operation = run(now)
    assert operation.state == "failed_no_effect"
    assert "not a public address" in last_error(operation)
    assert helpdesk.requests == []
    # A file naming a loopback address is refused at start-up unless the host is allowed.
    get_runtime.cache_clear()
    with pytest.raises(ActionsError, match=r"helpdesk\.yaml:1:7: destination\.url: 127\.0\.0\.1 "
                                           r"is not a public address"):
        get_runtime()


def test_an_invalid_file_is_refused_with_its_line_at_start_up_and_by_check_actions(
        actions: Path, settings: Any) -> None:
    path = actions / "helpdesk.yaml"
    text = path.read_text(encoding="utf-8").replace("timeout_s: 5", "timeout_s: soon")
    path.write_text(text, encoding="utf-8")
    line = text.splitlines().index("  timeout_s: soon") + 1
    expected = f"{path}:{line}:14: destination.timeout_s: must be a number of seconds"
    get_runtime.cache_clear()
    with pytest.raises(ActionsError) as refused:
        get_runtime()
    assert expected in str(refused.value)

    out = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("check_actions", stdout=out)
    assert failed.value.returncode == 1
    assert out.getvalue().startswith(expected)
    # Every other command refuses to run on it: the system checks report it.
    with pytest.raises(SystemCheckError, match=r"dispatch\.E011") as checked:
        call_command("check")
    assert expected in str(checked.value)


def test_check_actions_passes_a_valid_folder(actions: Path) -> None:
    out = StringIO()
    call_command("check_actions", stdout=out)
    assert out.getvalue().strip() == f"{actions / 'helpdesk.yaml'}: ok: tickets.create version 1"


def test_the_fingerprint_includes_the_file(actions: Path, helpdesk: Helpdesk) -> None:
    before = get_runtime().contract("tickets.create").fingerprint
    path = actions / "helpdesk.yaml"
    path.write_text(path.read_text(encoding="utf-8").replace(
        "Open a helpdesk ticket.", "Open a ticket."), encoding="utf-8")
    get_runtime.cache_clear()
    assert get_runtime().contract("tickets.create").fingerprint != before
