"""Traces (docs/design.md#tracing): one trace from the request (REST, or an MCP call) that carries
a W3C `traceparent` through the decision, the claim, the Celery task and the attempt to the
destination, whose request carries the `traceparent` of the attempt's outbound span; the
proposal and operation ids noted on the spans, no argument value in any span.

The web is Django's test client (the MCP gateway, the SDK's client connected to it in-process)
and the worker runs the task eagerly on the claim's commit, all in this process, so the SDK's
`InMemorySpanExporter` sees every span; the Celery span is
CeleryInstrumentor's own. The destination is a real HTTP service on loopback (the helpdesk HTTP
action of tests/db/test_http_actions.py, docs/actions.md) that records the headers it received.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import Client
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from dispatch.models import Operation
from dispatch.runtime import get_runtime
from tests.db.test_http_actions import Helpdesk, actions, helpdesk
from tests.support.processes import ROOT, child_env
from tests.support.tracing import captured_spans, chain, every_value
from tests.support.web import WebServer
from tests.support.workers import wait_for, worker_pool

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("actions", "run_eagerly")]
#: The helpdesk action and its service (tests/db/test_http_actions.py), imported as fixtures.
__all__ = ["actions", "helpdesk"]

#: A read of the helpdesk that needs no approval, as a JSON action file: an MCP call of it runs
#: at once.
COUNT_ACTION = {
    "name": "tickets.count", "version": 1, "description": "Count the open tickets of a queue.",
    "input_schema": {"type": "object", "additionalProperties": False, "required": ["queue"],
                     "properties": {"queue": {"type": "string", "pattern": "^[a-z]+$"}}},
    "effects": ["read"], "approval": "none", "authority": {"queue": "queue"},
    "idempotency": "none", "retries": 1}
#: The arguments, each a value no id, name or number of the run can hold by chance.
QUEUE = "quokkaqueue"
SUBJECT = "Refund-subject-Zq81 narwhal"


@pytest.fixture
def run_eagerly(settings: Any) -> None:
    settings.CELERY_TASK_ALWAYS_EAGER = True  # the worker's task runs on the claim's commit


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with captured_spans() as exporter:
        yield exporter


def proposed(now: datetime, *, dispatch_on_approval: bool) -> tuple[str, str, Any]:
    """The agent's proposal; the agent's token, the operator's token and the proposal."""
    from dispatch.services.authority import grant_issue
    from dispatch.services.principals import agent_create, human_create, token_issue
    from dispatch.services.proposals import proposal_create

    agent, agent_token = agent_create(name="helper", tenant="acme", tools=["tickets.create"])
    operator, _ = human_create(name="lead", tenant="acme", role="operator", password="pw")
    grant_issue(issuer="admin", subject=agent, operations=["tickets.create"],
                scope={"queue": [QUEUE]}, now=now - timedelta(minutes=1))
    proposal = proposal_create(principal=agent, operation="tickets.create",
                               arguments={"queue": QUEUE, "subject": SUBJECT}, now=now,
                               dispatch_on_approval=dispatch_on_approval)
    return agent_token, token_issue(principal=operator), proposal


def approved(now: datetime) -> tuple[str, Any]:
    """A proposal an operator granted over the API; the agent's token and the proposal."""
    agent_token, operator_token, proposal = proposed(now, dispatch_on_approval=False)
    granted = post(f"approvals/{proposal.approval.id}/decision/", operator_token, None,
                   {"decision": "grant", "digest": proposal.digest})
    assert granted.status_code == 200, granted.content
    return agent_token, proposal


def traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def post(path: str, token: str, header: str | None, body: dict[str, Any] | None = None) -> Any:
    """POST to the API in-process, with `header` as the `traceparent` when given."""
    return Client().post(f"/api/v1/{path}", data=json.dumps(body or {}),
                         content_type="application/json",
                         headers={"Authorization": f"Bearer {token}",
                                  **({"traceparent": header} if header else {})})


def assert_one_trace_to_the_destination(
    found: list[ReadableSpan], helpdesk: Helpdesk, trace_id: str, parent_id: str,
    operation: Operation, below: list[str], root: str = "POST api/v1/",
) -> None:
    # The destination received the trace: the incoming trace id, and as its parent the span
    # of the attempt's outbound request.
    (request,) = helpdesk.requests
    headers = request.headers
    version, sent_trace, sent_parent, _ = headers["traceparent"].split("-")
    assert (version, sent_trace) == ("00", trace_id)
    (client,) = [s for s in found if s.kind is SpanKind.CLIENT]
    assert f"{client.context.span_id:016x}" == sent_parent
    assert client.attributes is not None
    assert client.attributes["http.request.method"] == "POST"
    assert client.attributes["http.response.status_code"] == 201
    # Every span of the run is one trace, from the caller's span down to that request.
    assert {f"{s.context.trace_id:032x}" for s in found} == {trace_id}
    path = chain(found, client)
    assert path[0].parent is not None and path[0].parent.is_remote
    assert f"{path[0].parent.span_id:016x}" == parent_id
    names = [s.name for s in path]
    assert names[0].startswith(root), names  # Django's span named by its route, or the MCP call's
    assert names[1:] == below, names
    # The ids, on the spans that act on them.
    by_name = {s.name: s for s in found}
    for name in ("dispatch.claim", "dispatch.attempt", "dispatch.outcome"):
        attributes = by_name[name].attributes or {}
        assert attributes["console.proposal_id"] == operation.proposal_id, name
        assert attributes["console.operation_id"] == operation.id, name
    assert (by_name["dispatch.attempt"].attributes or {})["console.attempt"] == 1
    assert (by_name["dispatch.outcome"].attributes or {})["console.outcome"] == "completed"
    # No argument value anywhere: no attribute, event or status of any span holds one.
    for text in every_value(found):
        assert QUEUE not in text and "Zq81" not in text and "narwhal" not in text, text


def test_a_dispatch_request_is_traced_to_the_destination(
        helpdesk: Helpdesk, spans: InMemorySpanExporter, now: datetime) -> None:
    agent_token, proposal = approved(now)
    spans.clear()  # the decision's own trace: not this one
    header, trace_id, parent_id = traceparent()

    answer = post(f"proposals/{proposal.id}/dispatch/", agent_token, header)

    assert answer.status_code in (200, 202), answer.content
    operation = Operation.objects.get(proposal_id=proposal.id)
    assert operation.state == "completed", operation.state
    found = list(spans.get_finished_spans())
    assert_one_trace_to_the_destination(found, helpdesk, trace_id, parent_id, operation, [
        "dispatch.claim", "run/dispatch.tasks.operation_execute", "dispatch.attempt", "POST"])
    server = chain(found, found[0])[0]
    assert server.kind is SpanKind.SERVER
    assert (server.attributes or {})["console.proposal_id"] == proposal.id
    assert (server.attributes or {})["console.principal"] == proposal.principal_id
    assert len(str((server.attributes or {})["console.request_id"])) == 32


def test_a_decision_that_dispatches_on_approval_is_traced_to_the_destination(
        helpdesk: Helpdesk, spans: InMemorySpanExporter, now: datetime) -> None:
    _, operator_token, proposal = proposed(now, dispatch_on_approval=True)
    header, trace_id, parent_id = traceparent()

    answer = post(f"approvals/{proposal.approval.id}/decision/", operator_token, header,
                  {"decision": "grant", "digest": proposal.digest})

    assert answer.status_code == 200, answer.content
    operation = Operation.objects.get(proposal_id=proposal.id)
    assert operation.state == "completed", operation.state
    found = list(spans.get_finished_spans())
    assert_one_trace_to_the_destination(found, helpdesk, trace_id, parent_id, operation, [
        "approval.decide", "run/dispatch.tasks.proposal_run", "dispatch.attempt", "POST"])
    # The worker claims, then runs attempt 1: two spans of its task.
    by_id = {s.context.span_id: s.name for s in found}
    claim = next(s for s in found if s.name == "dispatch.claim")
    assert claim.parent is not None
    assert by_id[claim.parent.span_id] == "run/dispatch.tasks.proposal_run"
    decide = next(s for s in found if s.name == "approval.decide")
    assert (decide.attributes or {})["console.approval_id"] == proposal.approval.id
    assert (decide.attributes or {})["console.decision"] == "grant"


def test_without_otel_variables_no_sdk_is_loaded_and_nothing_is_traced() -> None:
    """A process with no `OTEL_*` variable starts the console without the SDK: no provider,
    no exporter, no middleware of OpenTelemetry's, and an outbound request sends no
    `traceparent`."""
    env = {k: v for k, v in child_env().items() if not k.startswith("OTEL_")}
    script = (
        "import sys, config.wsgi\n"
        "from django.conf import settings\n"
        "from opentelemetry import trace\n"
        "from dispatch.observability.tracing import http_client_span\n"
        "with http_client_span('POST', 'example.com', 443) as (_, carried): pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')),\n"
        "      any('opentelemetry' in m for m in settings.MIDDLEWARE),\n"
        "      type(trace.get_tracer_provider()).__name__, carried)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True, timeout=120).stdout.strip()
    assert out.splitlines()[-1] == "[] False ProxyTracerProvider {}"


def exported_spans(output: str) -> list[dict[str, Any]]:
    """The spans `OTEL_TRACES_EXPORTER=console` wrote among a process's output (JSON objects
    with a `context`; the JSON log lines beside them are left out)."""
    decoder, found, at = json.JSONDecoder(), [], output.find("{")
    while at != -1:
        try:
            item, end = decoder.raw_decode(output, at)
        except json.JSONDecodeError:
            at = output.find("{", at + 1)
            continue
        if isinstance(item, dict) and "context" in item:
            found.append(item)
        at = output.find("{", end)
    return found


def test_otel_variables_turn_tracing_on_with_the_named_exporter() -> None:
    """`OTEL_TRACES_EXPORTER=console`: the SDK is on, the middleware takes the caller's
    `traceparent`, and the request's span is exported on standard output under it."""
    env = {**{k: v for k, v in child_env().items() if not k.startswith("OTEL_")},
           "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "console-web-test",
           "ALLOWED_HOSTS": "testserver"}
    header, trace_id, _ = traceparent()
    script = (
        "from django.test import Client\n"
        "import config.wsgi\n"
        "from opentelemetry import trace\n"
        f"Client().get('/api/v1/contracts/', headers={{'traceparent': {header!r}}})\n"
        "assert Client().get('/healthz', HTTP_HOST='10.1.2.3').status_code == 200\n"
        "trace.get_tracer_provider().shutdown()\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True, timeout=120).stdout
    (server,) = [s for s in exported_spans(out) if s["kind"] == "SpanKind.SERVER"]
    assert server["context"]["trace_id"] == f"0x{trace_id}"
    assert server["name"] == "GET api/v1/contracts/"
    assert server["resource"]["attributes"]["service.name"] == "console-web-test"
    assert os.environ.get("OTEL_TRACES_EXPORTER") is None  # this process stays untouched


def test_an_mcp_call_is_traced_to_the_destination(
        helpdesk: Helpdesk, actions: Path, spans: InMemorySpanExporter, now: datetime) -> None:
    """An agent's MCP `tools/call` made within its own trace (the SDK's client carries the
    `traceparent` in the call's `_meta`): the gateway's span, the claim, the task, the attempt
    and the request to the destination are one trace with it."""
    from asgiref.sync import sync_to_async
    from django.db import connections
    from mcp import Client
    from opentelemetry import context, propagate

    from dispatch.gateway.server import Gateway
    from dispatch.services.authority import grant_issue
    from dispatch.services.principals import agent_create

    destination = {"name": "helpdesk", "url": f"{helpdesk.base}/tickets", "method": "POST",
                   "timeout_s": 5}
    (actions / "count.json").write_text(json.dumps({**COUNT_ACTION, "destination": destination}),
                                        encoding="utf-8")
    get_runtime.cache_clear()
    agent, token = agent_create(name="counter", tenant="acme", tools=["tickets.count"])
    grant_issue(issuer="admin", subject=agent, operations=["tickets.count"],
                scope={"queue": [QUEUE]}, now=now - timedelta(minutes=1))
    header, trace_id, parent_id = traceparent()

    async def call() -> Any:
        attached = context.attach(propagate.extract({"traceparent": header}))
        try:
            async with Client(Gateway(token=token, wait_seconds=10).server) as client:
                return await client.call_tool("tickets.count", {"queue": QUEUE})
        finally:
            context.detach(attached)
            # The gateway's store calls ran on asgiref's thread: its connection ends there.
            await sync_to_async(connections.close_all, thread_sensitive=True)()

    result = asyncio.run(call())

    assert not result.is_error, result
    operation = Operation.objects.get(proposal__principal=agent)
    assert operation.state == "completed", operation.state
    found = list(spans.get_finished_spans())
    assert_one_trace_to_the_destination(found, helpdesk, trace_id, parent_id, operation, [
        "dispatch.claim", "run/dispatch.tasks.operation_execute", "dispatch.attempt", "POST"],
        root="tools/call tickets.count")
    gateway = next(s for s in found if s.name == "tools/call tickets.count")
    assert gateway.kind is SpanKind.SERVER  # the MCP SDK's span, under the call's `_meta`
    assert (gateway.attributes or {})["console.principal"] == agent.id


@pytest.mark.redis
@pytest.mark.slow
def test_across_gunicorn_the_broker_and_a_worker_one_trace_reaches_the_destination(
        helpdesk: Helpdesk, actions: Path, tmp_path: Path, now: datetime) -> None:
    """Production's shape, tracing turned on by the standard variables alone: gunicorn takes the
    caller's `traceparent`, the task carries it through Redis to a Celery worker of its own
    process, whose request to the destination carries it on; each process exports its spans
    (`OTEL_TRACES_EXPORTER=console`), and they join into the one trace."""
    agent_token, proposal = approved(now)
    header, trace_id, parent_id = traceparent()
    with worker_pool(tmp_path) as pool:
        tracing = {"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "100",
                   "ACTIONS_DIR": str(actions), "ACTIONS_ALLOWED_HOSTS": "127.0.0.1"}
        worker = pool.start(**tracing)
        web = WebServer(env=child_env(CELERY_BROKER_URL=pool.broker, CELERY_QUEUE=pool.queue,
                                      **tracing), log=tmp_path / "web.log", workers=1)
        web.start()
        try:
            answer = httpx.post(f"{web.url}/api/v1/proposals/{proposal.id}/dispatch/", json={},
                                headers={"Authorization": f"Bearer {agent_token}",
                                         "traceparent": header}, timeout=60)
            assert answer.status_code == 202, answer.text
            operation = Operation.objects.get(proposal_id=proposal.id)
            wait_for(lambda: (operation.refresh_from_db() or operation.state == "completed"),
                     60, "the worker to complete the operation")
            wait_for(lambda: "dispatch.outcome" in worker.output(), 10, "the worker's spans")
        finally:
            web.stop()
    web_spans = exported_spans(web.log.read_text())
    worker_spans = exported_spans(worker.output())
    ours = [s for s in web_spans + worker_spans if s["context"]["trace_id"] == f"0x{trace_id}"]
    by_name = {s["name"]: s for s in ours}
    # The web's part, under the caller's span; the worker's, under the web's publish.
    server = by_name["POST api/v1/proposals/<str:proposal_id>/dispatch/"]
    assert server["parent_id"] == f"0x{parent_id}"
    publish = by_name["apply_async/dispatch.tasks.operation_execute"]
    run = by_name["run/dispatch.tasks.operation_execute"]
    assert publish in web_spans and run in worker_spans
    assert run["parent_id"] == publish["context"]["span_id"]
    assert by_name["dispatch.attempt"]["parent_id"] == run["context"]["span_id"]
    client = by_name["POST"]
    assert client in worker_spans
    assert client["parent_id"] == by_name["dispatch.attempt"]["context"]["span_id"]
    # The destination heard the worker's request span, in the caller's trace.
    (request,) = helpdesk.requests
    assert request.headers["traceparent"] == (
        f"00-{trace_id}-{client['context']['span_id'][2:]}-01")
    for name in ("dispatch.claim", "dispatch.attempt", "dispatch.outcome"):
        attributes = by_name[name]["attributes"]
        assert attributes["console.operation_id"] == operation.id, name
        assert attributes["console.proposal_id"] == proposal.id, name
    for span in ours:
        text = json.dumps([span["attributes"], span["events"], span["status"]])
        assert QUEUE not in text and "Zq81" not in text and "narwhal" not in text, span["name"]
