"""The client against a scripted console (`httpx.MockTransport`): the requests it sends, the
refusals it raises, the retries it allows itself, and the waits that end in `Timeout`."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
import pytest

import exact_console
from exact_console import Client, Denied, Timeout, TransportError

ROOT = "http://console.test"
Answer = httpx.Response | Exception


class Script:
    """Answers requests in order from `answers` and records every request it was sent. An
    exception in the script is raised as the transport's failure."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    @property
    def sent(self) -> list[tuple[str, str]]:
        return [(r.method, r.url.raw_path.decode()) for r in self.requests]

    def body(self, index: int) -> Any:
        return json.loads(self.requests[index].content)


def ok(body: dict[str, Any], status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=body)


def refusal(status: int, code: str, message: str = "what to do",
            details: dict[str, Any] | None = None) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message,
                                                  "details": details or {}}})


def pending(proposal_id: str = "prp_1") -> dict[str, Any]:
    return {"id": proposal_id, "approval": {"id": "apr_1", "state": "pending"},
            "operation_id": None}


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def client(script: Script) -> Iterator[Client]:
    with Client(ROOT, "eac_secret", transport=httpx.MockTransport(script)) as console:
        yield console


def fail(script: Script, *answers: Answer) -> None:
    script.answers.extend(answers)


def connect_error() -> httpx.ConnectError:
    return httpx.ConnectError("connection refused")


def test_calls_go_under_the_api_root_with_the_bearer_token(
    client: Client, script: Script,
) -> None:
    fail(script, ok({"results": []}), ok({"id": "prp_1"}, 201))
    assert client.contracts() == {"results": []}
    assert dict(client.propose("crm.lookup", {"customer_id": "cus-001"})) == {"id": "prp_1"}
    assert script.sent == [("GET", "/api/v1/contracts/"), ("POST", "/api/v1/proposals/")]
    first = script.requests[0]
    assert first.headers["Authorization"] == "Bearer eac_secret"
    assert first.headers["Accept"] == "application/json"
    assert first.headers["User-Agent"] == f"exact-console/{exact_console.__version__}"
    assert script.body(1) == {"operation": "crm.lookup", "arguments": {"customer_id": "cus-001"}}
    assert script.requests[1].headers["Content-Type"] == "application/json"


def test_a_proposal_sends_only_the_options_given(client: Client, script: Script) -> None:
    fail(script, ok({"id": "prp_1"}, 201))
    client.propose("email.send", {"draft": {"id": "res_1", "revision": 2}}, call_id="call-1",
                   execution_id="run-42", dispatch_on_approval=False, approval_expires_in=120)
    assert script.body(0) == {
        "operation": "email.send", "arguments": {"draft": {"id": "res_1", "revision": 2}},
        "call_id": "call-1", "execution_id": "run-42", "dispatch_on_approval": False,
        "approval_expires_in": 120}


def test_every_call_has_its_path_and_body(client: Client, script: Script) -> None:
    calls: list[tuple[Callable[[], Any], str, str, Any]] = [
        (lambda: client.proposal("prp_1"), "GET", "/api/v1/proposals/prp_1/", None),
        (lambda: client.dispatch("prp_1"), "POST", "/api/v1/proposals/prp_1/dispatch/", {}),
        (lambda: client.dispatch("prp_1", permit="prm_9"), "POST",
         "/api/v1/proposals/prp_1/dispatch/", {"permit": "prm_9"}),
        (lambda: client.operation("op_1"), "GET", "/api/v1/operations/op_1/", None),
        (lambda: client.cancel_proposal("prp_1"), "POST", "/api/v1/proposals/prp_1/cancel/", {}),
        (lambda: client.cancel_operation("op_1", reason="stop"), "POST",
         "/api/v1/operations/op_1/cancel/", {"reason": "stop"}),
        (lambda: client.reauthorize("op_1"), "POST", "/api/v1/operations/op_1/reauthorize/", {}),
        (lambda: client.create_resource("email_draft", {"to": ["a@b.example"]}), "POST",
         "/api/v1/resources/", {"kind": "email_draft", "payload": {"to": ["a@b.example"]}}),
        (lambda: client.resource("res_1"), "GET", "/api/v1/resources/res_1/", None),
        (lambda: client.revise("res_1", base_revision=1, payload={"x": 1}), "POST",
         "/api/v1/resources/res_1/revisions/", {"base_revision": 1, "payload": {"x": 1}}),
        (lambda: client.decide("apr_1", decision="grant", digest="sha256:ab", reason="ok"),
         "POST", "/api/v1/approvals/apr_1/decision/",
         {"decision": "grant", "digest": "sha256:ab", "reason": "ok"}),
        (lambda: client.decide_renewal("ren_1", decision="deny", digest="sha256:ab"), "POST",
         "/api/v1/renewals/ren_1/decision/", {"decision": "deny", "digest": "sha256:ab"}),
        (lambda: client.resolve("op_1", outcome="completed", evidence="seen"), "POST",
         "/api/v1/operations/op_1/resolve/", {"outcome": "completed", "evidence": "seen"}),
        (lambda: client.grants(page_size=5), "GET", "/api/v1/grants/?page_size=5", None),
        (lambda: client.delegate("gr_1", subject="bot", operations=["crm.lookup"],
                                 scope={"customer": "*"}), "POST",
         "/api/v1/grants/gr_1/delegate/",
         {"subject": "bot", "operations": ["crm.lookup"], "scope": {"customer": "*"}}),
        (lambda: client.audit(proposal="prp_1", kind="dispatch.denied"), "GET",
         "/api/v1/audit/?proposal=prp_1&kind=dispatch.denied", None),
    ]
    for index, (call, method, path, body) in enumerate(calls):
        fail(script, ok({"n": index}))
        assert call() == {"n": index}
        assert script.sent[-1] == (method, path)
        sent = script.requests[-1].content
        assert (json.loads(sent) if sent else None) == body, path


def test_an_id_is_one_path_segment_whatever_it_holds(client: Client, script: Script) -> None:
    fail(script, refusal(404, "not_found"))
    with pytest.raises(Denied):
        client.proposal("../operations/op_1?x=1")
    assert script.sent == [("GET", "/api/v1/proposals/..%2Foperations%2Fop_1%3Fx%3D1/")]


def test_a_refusal_is_denied_with_its_code_status_message_and_details(
    client: Client, script: Script,
) -> None:
    fail(script, refusal(403, "scope_violation", "acct-002 is outside your grant",
                         {"key": "account", "value": "acct-002"}))
    with pytest.raises(Denied) as caught:
        client.propose("payments.transfer", {"from_account": "acct-002"}, call_id="c-1")
    denied = caught.value
    assert (denied.status, denied.code, denied.message, denied.details) == (
        403, "scope_violation", "acct-002 is outside your grant",
        {"key": "account", "value": "acct-002"})
    assert str(denied) == "403 scope_violation: acct-002 is outside your grant"
    assert isinstance(denied, exact_console.Error)
    assert len(script.requests) == 1  # a refusal is never sent again, call_id or not


def test_a_refusal_without_details_has_empty_details(client: Client, script: Script) -> None:
    fail(script, httpx.Response(409, json={"error": {"code": "approval_pending",
                                                     "message": "wait"}}))
    with pytest.raises(Denied) as caught:
        client.dispatch("prp_1")
    assert (caught.value.code, caught.value.details) == ("approval_pending", {})


@pytest.mark.parametrize(("status", "call"), [
    (500, lambda c: c.operation("op_1")),
    (502, lambda c: c.dispatch("prp_1")),
    (503, lambda c: c.dispatch("prp_1")),
])
def test_a_server_failure_answered_as_a_refusal_is_not_retried(
    client: Client, script: Script, status: int, call: Callable[[Client], Any],
) -> None:
    # A 500 is a bug, not an outage; a 502 or 503 is retried only for a call that is safe to
    # repeat (test_exact_console_retries.py), and a dispatch is not.
    fail(script, refusal(status, "persistence_failure"))
    with pytest.raises(Denied) as caught:
        call(client)
    assert caught.value.status == status
    assert len(script.requests) == 1


@pytest.mark.parametrize("answer", [
    httpx.Response(404, text="<html>Not found</html>"),
    httpx.Response(500, json={"detail": "oops"}),
    httpx.Response(200, text="not json"),
    httpx.Response(200, json=["a", "list"]),
])
def test_an_answer_that_is_not_the_apis_json_is_a_transport_error(
    client: Client, script: Script, answer: httpx.Response,
) -> None:
    fail(script, answer)
    with pytest.raises(TransportError, match=f"status {answer.status_code}"):
        client.proposal("prp_1")
    assert len(script.requests) == 1


def test_a_read_is_retried_after_transport_failures_a_bounded_number_of_times(
    client: Client, script: Script,
) -> None:
    fail(script, connect_error(), httpx.ReadTimeout("slow"), ok({"id": "op_1"}))
    assert dict(client.operation("op_1")) == {"id": "op_1"}
    assert script.sent == [("GET", "/api/v1/operations/op_1/")] * 3

    fail(script, connect_error(), connect_error(), connect_error(), ok({"id": "op_1"}))
    with pytest.raises(TransportError, match="tried 3 times") as caught:
        client.operation("op_1")
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert len(script.requests) == 6  # 3 more: the fourth answer is never asked for


def test_the_error_names_the_last_failure_not_an_earlier_one(
    client: Client, script: Script,
) -> None:
    fail(script, connect_error(), httpx.ProxyError("the proxy refused"))
    with pytest.raises(TransportError, match=r"ProxyError: the proxy refused \(tried 2 times\)"):
        client.operation("op_1")
    assert len(script.requests) == 2  # a proxy's refusal is not one to wait out


def test_retries_back_off(script: Script, monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    fail(script, connect_error(), connect_error(), connect_error(), connect_error(),
         ok({"results": []}))
    steady = exact_console.Retry(attempts=4, jitter=0.0)
    with Client(ROOT, "t", retry=steady, transport=httpx.MockTransport(script)) as console:
        assert console.contracts() == {"results": []}
    assert slept == pytest.approx([0.2, 0.4, 0.8, 1.6])


def test_a_proposal_with_a_call_id_is_retried_and_the_same_call_id_is_sent(
    client: Client, script: Script,
) -> None:
    fail(script, httpx.ReadTimeout("response lost"), ok({"id": "prp_1"}))
    assert dict(client.propose("crm.lookup", {"customer_id": "c"}, call_id="call-7")) == {
        "id": "prp_1"}
    assert script.sent == [("POST", "/api/v1/proposals/")] * 2
    assert script.body(0) == script.body(1)
    assert script.body(1)["call_id"] == "call-7"


@pytest.mark.parametrize("call", [
    lambda c: c.propose("crm.lookup", {"customer_id": "c"}),
    lambda c: c.dispatch("prp_1"),
    lambda c: c.decide("apr_1", decision="grant", digest="sha256:ab"),
    lambda c: c.create_resource("email_draft", {}),
    lambda c: c.cancel_operation("op_1"),
    lambda c: c.resolve("op_1", outcome="completed", evidence="e"),
])
def test_a_call_that_is_not_idempotent_is_never_sent_twice(
    client: Client, script: Script, call: Callable[[Client], Any],
) -> None:
    fail(script, httpx.ReadTimeout("response lost"), ok({}))
    with pytest.raises(TransportError, match="tried once"):
        call(client)
    assert len(script.requests) == 1


@pytest.mark.parametrize("call", [
    lambda c: c.dispatch("prp_1"),
    lambda c: c.decide("apr_1", decision="grant", digest="sha256:ab"),
])
def test_a_call_that_never_left_is_sent_again_whatever_it_is(
    client: Client, script: Script, call: Callable[[Client], Any],
) -> None:
    # A connection that could not be made sent nothing: no effect can have happened.
    fail(script, connect_error(), httpx.ConnectTimeout("no route"), ok({"n": 1}))
    assert call(client) == {"n": 1}
    assert len(script.requests) == 3


class _Console(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    connections: ClassVar[list[tuple[str, int]]] = []

    def do_GET(self) -> None:
        type(self).connections.append(self.client_address)
        body = b'{"results": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_the_client_reuses_one_connection() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Console)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with Client(f"http://127.0.0.1:{server.server_port}", "t") as console:
            for _ in range(3):
                assert console.contracts() == {"results": []}
    finally:
        server.shutdown()
        server.server_close()
    assert len(_Console.connections) == 3
    assert len(set(_Console.connections)) == 1


def test_next_page_follows_the_link_and_stops_at_the_end(
    client: Client, script: Script,
) -> None:
    link = f"{ROOT}/api/v1/audit/?cursor=cD0y&proposal=prp_1"
    fail(script, ok({"results": [1], "next": link, "previous": None}),
         ok({"results": [2], "next": None, "previous": "x"}))
    first = client.audit(proposal="prp_1")
    second = client.next_page(first)
    assert second is not None
    assert second["results"] == [2]
    assert client.next_page(second) is None
    assert script.sent[-1] == ("GET", "/api/v1/audit/?cursor=cD0y&proposal=prp_1")


def test_next_page_never_sends_the_token_elsewhere(client: Client, script: Script) -> None:
    with pytest.raises(TransportError, match="not under"):
        client.next_page({"results": [], "next": "http://elsewhere.test/api/v1/audit/?c=1"})
    assert script.requests == []


def test_the_base_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="http"):
        Client("console.test", "t")


def test_base_url_with_a_trailing_slash(script: Script) -> None:
    fail(script, ok({"results": []}))
    with Client(ROOT + "/", "t", transport=httpx.MockTransport(script)) as console:
        console.contracts()
    assert script.sent == [("GET", "/api/v1/contracts/")]


# --- waits ---------------------------------------------------------------------------------

def test_wait_for_decision_polls_until_a_human_decides(client: Client, script: Script) -> None:
    granted = {**pending(), "approval": {"id": "apr_1", "state": "granted"}}
    fail(script, ok(pending()), ok(pending()), ok(granted))
    started = time.monotonic()
    assert client.wait_for_decision("prp_1", timeout=5) == granted
    assert 0.5 < time.monotonic() - started < 2  # 0.2 s, then 0.4 s
    assert script.sent == [("GET", "/api/v1/proposals/prp_1/")] * 3


@pytest.mark.parametrize("approval", [None, {"id": "apr_1", "state": "denied"}])
def test_wait_for_decision_answers_at_once_when_nobody_is_to_decide(
    client: Client, script: Script, approval: dict[str, Any] | None,
) -> None:
    proposal = {**pending(), "approval": approval}
    fail(script, ok(proposal))
    assert client.wait_for_decision("prp_1", timeout=5) == proposal


def test_wait_for_decision_past_its_timeout_is_a_timeout(script: Script) -> None:
    script.answers = [ok(pending()) for _ in range(50)]
    started = time.monotonic()
    with Client(ROOT, "t", transport=httpx.MockTransport(script)) as console, \
            pytest.raises(Timeout) as caught:
        console.wait_for_decision("prp_1", timeout=0.5)
    assert 0.5 <= time.monotonic() - started < 1.5
    assert caught.value.code == "approval_pending"
    assert caught.value.last == pending()
    assert isinstance(caught.value, TimeoutError)
    assert 2 <= len(script.requests) <= 4  # bounded polling, not a busy loop


def test_wait_polls_with_a_growing_interval_capped_at_two_seconds(
    script: Script, monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(time, "sleep", sleep)
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    script.answers = [ok({"id": "op_1", "state": "claimed"}) for _ in range(20)]
    with Client(ROOT, "t", transport=httpx.MockTransport(script)) as console, \
            pytest.raises(Timeout) as caught:
        console.wait_for_outcome("op_1", timeout=10)
    # The last sleep ends at the deadline, where one more look is taken.
    assert slept == pytest.approx([0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0, 1.0])
    assert caught.value.code == "claimed"
    assert clock[0] == pytest.approx(10)
    assert len(script.requests) == 9


def test_wait_for_outcome_answers_the_settled_operation(client: Client, script: Script) -> None:
    done: dict[str, Any] = {"id": "op_1", "state": "completed", "result": {"ok": True}}
    fail(script, ok({"id": "op_1", "state": "claimed"}), ok(done))
    assert dict(client.wait_for_outcome("op_1", timeout=5)) == done
    for state in sorted(exact_console.SETTLED_STATES):
        fail(script, ok({"id": "op_1", "state": state}))
        assert client.wait_for_outcome("op_1", timeout=0)["state"] == state


def test_a_refusal_during_a_wait_is_raised(client: Client, script: Script) -> None:
    fail(script, refusal(404, "not_found"))
    with pytest.raises(Denied, match="not_found"):
        client.wait_for_outcome("op_forged", timeout=5)


# --- tools ---------------------------------------------------------------------------------

CONTRACTS = {"results": [
    {"name": "email.send", "version": 1, "fingerprint": "sha256:aa",
     "input_schema": {"type": "object", "properties": {"draft": {"type": "object"}}},
     "effects": ["external_write"], "approval": {"role": "operator", "expires_in": 3600},
     "idempotency": "receiver_dedup"},
    {"name": "crm.lookup", "version": 2, "fingerprint": "sha256:bb",
     "input_schema": {"type": "object", "properties": {"customer_id": {"type": "string"}}},
     "effects": ["read"], "approval": None, "idempotency": "idempotent"},
]}


def test_tools_are_the_contracts(client: Client, script: Script) -> None:
    fail(script, ok(CONTRACTS))
    email, lookup = exact_console.tools(client)
    assert (email.name, email.needs_approval, email.input_schema) == (
        "email.send", True, CONTRACTS["results"][0]["input_schema"])
    assert "role operator" in email.description
    assert "external_write" in email.description
    assert (lookup.name, lookup.needs_approval) == ("crm.lookup", False)
    assert lookup.description == ("crm.lookup (contract v2). Effects: read. "
                                  "Runs without an approval.")
    assert lookup.contract["fingerprint"] == "sha256:bb"


def test_tools_for_some_operations(client: Client, script: Script) -> None:
    fail(script, ok(CONTRACTS))
    assert [t.name for t in exact_console.tools(client, ["crm.lookup"])] == ["crm.lookup"]
    assert [t.name for t in exact_console.tools(CONTRACTS, operations=[])] == []
    with pytest.raises(ValueError, match=r"payments\.transfer"):
        exact_console.tools(CONTRACTS, ["crm.lookup", "payments.transfer"])
