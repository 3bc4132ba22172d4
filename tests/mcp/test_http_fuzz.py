"""`/mcp/` of the live HTTP gateway under malformed JSON-RPC, wrong tokens and huge bodies
(docs/mcp.md#http): every answer is a protocol error (a JSON-RPC error object), a refusal as a
tool result, or one of the transport's own 4xx, never a 5xx, never a crash of a handler
(`-32603`), and never a proposal or an effect.

Every generated `tools/call` is invalid by construction: its name is no tool of the agent's, or
its arguments fail that tool's own input schema (as `tools/list` publishes it), so no call made
here may propose anything. Requests go out three ways: as a session's opening request (no
session id), inside an initialized 2025-11-25 session, and as stateless 2026-07-28 requests (the
`_meta` envelope and the `Mcp-Method`/`Mcp-Name` headers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from mcp.shared.inbound import encode_header_value

from demo.destinations.runner import list_all
from dispatch.models import Proposal
from tests.mcp.conftest import Gateway, Stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.slow]

ACCEPT = "application/json, text/event-stream"
LEGACY = "2025-11-25"
MODERN = "2026-07-28"
#: What the gateway may answer: the SDK's protocol errors (400, 404 unknown session, 405, 406,
#: 413, 415), the gate's 401, a notification's 202, a JSON-RPC answer's 200.
ALLOWED = {200, 202, 400, 401, 404, 405, 406, 413, 415}
INTERNAL_ERROR = -32603
MIB = 1024 * 1024


def fuzzing(examples: int) -> settings:
    """Each example is a request to the live gateway: 150 in all keep the test to seconds. The
    fixtures (the gateway, the worker) are set up once for all the examples, on purpose."""
    return settings(max_examples=examples, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

# --- what is sent ---------------------------------------------------------------------------------

ascii_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                               max_size=4),
    max_leaves=12)
json_objects = st.dictionaries(st.text(max_size=12), json_values, max_size=5)
METHODS = ["initialize", "tools/list", "tools/call", "tasks/get", "tasks/result", "tasks/list",
           "tasks/cancel", "ping", "notifications/initialized", "resources/list", "prompts/get",
           "sampling/createMessage", "logging/setLevel", "completion/complete"]
rpc_shaped = st.fixed_dictionaries(
    {"method": st.sampled_from(METHODS) | json_values},
    optional={"jsonrpc": st.sampled_from(["2.0", "1.0", "2", 2.0]) | json_values,
              "id": st.integers() | st.text(max_size=20) | json_values,
              "params": json_objects | json_values,
              "result": json_values, "error": json_values})
idempotency_keys = st.text(max_size=30) | json_values | st.just("x" * 201)


@dataclass
class Fuzz:
    """The live gateway, the agent's token, an initialized 2025-11-25 session, and the schemas
    of the agent's tools (to keep every generated call invalid)."""

    gateway: Gateway
    stack: Stack
    token: str
    session: str
    schemas: dict[str, Draft202012Validator]

    def post(self, body: bytes, headers: dict[str, str]) -> httpx2.Response:
        # HTTP itself admits no header value with edge whitespace: the client would refuse it.
        headers = {name: value.strip() for name, value in headers.items()}
        return httpx2.post(self.gateway.url, content=body, headers=headers, timeout=30)

    def headers(self, *, auth: str | None = "valid", session: bool = False,
                version: str | None = None) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": ACCEPT}
        if auth == "valid":
            headers["Authorization"] = f"Bearer {self.token}"
        elif auth is not None:
            headers["Authorization"] = auth
        if session:
            headers["Mcp-Session-Id"] = self.session
            headers["MCP-Protocol-Version"] = LEGACY
        if version is not None:
            headers["MCP-Protocol-Version"] = version
        return headers

    def invalid_call(self, name: str, arguments: Any) -> bool:
        """The call is no valid call of one of the agent's tools."""
        validator = self.schemas.get(name)
        return validator is None or not validator.is_valid(arguments)


def modern(body: Any, headers: dict[str, str]) -> tuple[Any, dict[str, str]]:
    """A 2026-07-28 stateless request: the envelope in `params._meta` and the routing headers
    the SDK checks against the body (where the body has something to route on)."""
    headers = {**headers, "MCP-Protocol-Version": MODERN}
    if isinstance(body, dict):
        params = body.get("params")
        if isinstance(params, dict):
            meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
            body = {**body, "params": {**params, "_meta": {
                **meta, "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "0"}}}}
            if isinstance(params.get("name"), str):
                headers["Mcp-Name"] = encode_header_value(params["name"])
        if isinstance(body.get("method"), str):
            headers["Mcp-Method"] = encode_header_value(body["method"])
    return body, headers


def _rpc(fuzz_url: str, token: str, body: Any, session: str | None = None) -> httpx2.Response:
    headers = {"Content-Type": "application/json", "Accept": ACCEPT,
               "Authorization": f"Bearer {token}"}
    if session is not None:
        headers.update({"Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY})
    return httpx2.post(fuzz_url, content=json.dumps(body), headers=headers, timeout=30)


def _initialized_session(url: str, token: str) -> str:
    opened = _rpc(url, token, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {},
        "clientInfo": {"name": "fuzz", "version": "0"}}})
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    assert _rpc(url, token, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                session).status_code == 202
    return session


@pytest.fixture
def fuzz(stack: Stack, gateway: Gateway) -> Iterator[Fuzz]:
    token = stack.world.owner_token
    session = _initialized_session(gateway.url, token)
    listed = messages(_rpc(gateway.url, token, {"jsonrpc": "2.0", "id": 1,
                                                "method": "tools/list"}, session))
    # A tool is called by its qualified name (its title) or its model-safe tool name, whichever
    # of the two MCP_TOOL_NAMES lists (docs/mcp.md#names).
    schemas = {name: Draft202012Validator(tool["inputSchema"])
               for tool in listed[0]["result"]["tools"]
               for name in (tool["name"], tool["title"], tool["title"].replace(".", "_"))}
    assert {"crm_lookup", "email_send", "payments_transfer", "crm.lookup"} <= set(schemas)
    before = Proposal.objects.count()
    yield Fuzz(gateway, stack, token, session, schemas)
    assert Proposal.objects.count() == before
    effects = list_all(stack.destinations.directory)
    assert effects["email"] == [] and effects["bank"] == []


# --- what may come back -----------------------------------------------------------------------

def messages(response: httpx2.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an answer: a JSON body, or the `data:` of each SSE event."""
    kind = response.headers.get("content-type", "")
    if kind.startswith("text/event-stream"):
        # SSE lines end at CR, LF or CRLF only (`splitlines` would also split at the U+2028 or
        # U+0085 that JSON leaves unescaped in a string).
        lines = re.split(r"\r\n|\r|\n", response.text)
        found = [json.loads(line[len("data:"):]) for line in lines
                 if line.startswith("data:") and line[len("data:"):].strip()]
    elif kind.startswith("application/json") and response.content:
        found = [response.json()]
    else:
        found = []
    return found


def check(response: httpx2.Response, *, calls: bool = False) -> list[dict[str, Any]]:
    """The answer is the protocol's: an allowed status, and every JSON-RPC message in it a
    well-formed response that is no internal error; with `calls`, a tool result is a refusal."""
    assert response.status_code in ALLOWED, (response.status_code, response.text[:500])
    found = messages(response)
    for message in found:
        assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", message
        if "error" in message:
            error = message["error"]
            assert isinstance(error["code"], int) and isinstance(error["message"], str), message
            assert error["code"] != INTERNAL_ERROR, message
        else:
            assert response.status_code == 200 and "result" in message, message
            if calls and "content" in message["result"]:
                assert message["result"].get("isError") is True, message
    if response.status_code >= 400 and found:
        assert all("error" in message for message in found), found
    return found


# --- the fuzzing ----------------------------------------------------------------------------------

AUTHS = st.sampled_from(["valid", "valid", "valid", None, "Bearer wrong-token", "Bearer",
                         "Basic YWdlbnQ6cHc=", "bearer valid-looking"]) | ascii_text.map(
    lambda text: f"Bearer {text}")
ACCEPTS = st.sampled_from([ACCEPT, "application/json", "text/event-stream", "*/*", ""]) | ascii_text
CONTENT_TYPES = st.sampled_from(["application/json", "application/json; charset=utf-8",
                                 "text/plain", "application/x-www-form-urlencoded", ""]
                                ) | ascii_text
VERSIONS = st.sampled_from([None, LEGACY, MODERN, "2025-06-18", "2024-11-05", "1999-01-01"]) | (
    ascii_text)
MODES = st.sampled_from(["opening", "session", "modern"])


def test_fuzzed_requests_are_answered_by_the_protocol_and_propose_nothing(fuzz: Fuzz) -> None:
    before = Proposal.objects.count()

    def send(body: bytes | Any, mode: str, *, auth: str | None = "valid",
             headers: dict[str, str] | None = None, calls: bool = False) -> httpx2.Response:
        sent = fuzz.headers(auth=auth, session=mode == "session")
        if mode == "modern":
            body, sent = modern(body, sent)
        sent.update(headers or {})
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = fuzz.post(raw, sent)
        if auth != "valid":
            assert response.status_code == 401, (response.status_code, response.text[:300])
            assert response.headers["www-authenticate"].startswith("Bearer")
        check(response, calls=calls)
        assert Proposal.objects.count() == before
        return response

    @fuzzing(20)
    @given(body=json_values, mode=MODES)
    def any_json(body: Any, mode: str) -> None:
        send(body, mode)

    @fuzzing(30)
    @given(body=rpc_shaped, mode=MODES, auth=AUTHS)
    def rpc_with_wrong_types(body: dict[str, Any], mode: str, auth: str | None) -> None:
        if body.get("method") == "tools/call" and isinstance(body.get("params"), dict):
            params = body["params"]
            if not fuzz.invalid_call(params.get("name"), params.get("arguments", {})):
                return  # a valid call proposes legitimately: not this test's
        send(body, mode, auth=auth, calls=True)

    # Mostly the agent's own tools with objects for arguments, so most calls reach the gateway's
    # handler and its validation, not only the SDK's.
    names = st.sampled_from(["crm.lookup", "email.send", "payments.transfer", "resource.create",
                             "resource.revise", "proposal.status", "crm_lookup", "email_send",
                             "payments_transfer", "resource_create", "resource_revise",
                             "proposal_status", "admin.grant", "admin_grant", "email_send_", "",
                             "email.send ", "a\u2028b"]) | st.text(max_size=30)
    call_arguments = st.fixed_dictionaries({}, optional={
        "customer_id": json_values, "draft": json_values | st.fixed_dictionaries(
            {}, optional={"id": json_values, "revision": json_values}),
        "amount": json_values | st.sampled_from(["10.00", "-1", "1e9", "0"]),
        "currency": json_values, "from_account": st.sampled_from(["acct-001"]) | json_values,
        "to_account": json_values, "memo": json_values, "approved": st.just(True),
        "permit": st.just("prm_x"), "kind": st.sampled_from(["email_draft"]) | json_values,
        "payload": json_objects, "proposal_id": json_values, "id": json_values,
        "base_revision": json_values})
    rarely = st.sampled_from([None, None, None])

    @fuzzing(50)
    @given(name=names, arguments=call_arguments | json_objects | json_values,
           mode=st.sampled_from(["session", "modern"]),
           meta=rarely | st.fixed_dictionaries({}, optional={
               "idempotency_key": idempotency_keys, "progressToken": json_values}),
           task=rarely | json_values, request_id=st.integers() | st.text(max_size=10))
    def tool_calls(name: str, arguments: Any, mode: str, meta: dict[str, Any] | None,
                   task: Any, request_id: int | str) -> None:
        if not fuzz.invalid_call(name, arguments):
            return  # a valid call proposes legitimately: not this test's
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if meta is not None:
            params["_meta"] = meta
        if task is not None:
            params["task"] = task
        send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params},
             mode, calls=True)

    @fuzzing(20)
    @given(body=st.binary(max_size=300) | st.binary(max_size=60).map(
               lambda tail: b'{"jsonrpc":"2.0","id":1,"method":"tools/\xff\xfe' + tail + b'"}'),
           mode=MODES)
    def raw_bytes(body: bytes, mode: str) -> None:
        send(body, mode)

    @fuzzing(30)
    @given(auth=AUTHS, accept=ACCEPTS, content_type=CONTENT_TYPES, version=VERSIONS,
           mode=MODES, method=st.sampled_from(["tools/list", "tools/call", "ping"]))
    def headers(auth: str | None, accept: str, content_type: str, version: str | None,
                mode: str, method: str) -> None:
        params: dict[str, Any] = {}
        if method == "tools/call":
            params = {"name": "payments.transfer", "arguments": {"approved": True}}
        extra = {"Accept": accept, "Content-Type": content_type}
        if version is not None:
            extra["MCP-Protocol-Version"] = version
        send({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}, mode, auth=auth,
             headers=extra, calls=True)

    for run in (any_json, rpc_with_wrong_types, tool_calls, raw_bytes, headers):
        run()
    assert Proposal.objects.count() == before


# --- deterministic cases --------------------------------------------------------------------------

TRANSFER = {"from_account": "acct-001", "to_account": "acct-999", "amount": "10.00",
            "currency": "EUR", "memo": ""}


def _transfer(arguments: dict[str, Any], request_id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "payments.transfer", "arguments": arguments}}


def test_a_transfer_that_says_it_is_approved_is_schema_invalid(fuzz: Fuzz) -> None:
    before = Proposal.objects.count()
    forged = {**TRANSFER, "approved": True, "permit": "prm_x"}
    sends: list[Callable[[], httpx2.Response]] = [
        lambda: fuzz.post(json.dumps(_transfer(forged, 11)).encode(),
                          fuzz.headers(session=True)),
        lambda: fuzz.post(*_encoded(modern(_transfer(forged, 12), fuzz.headers()))),
        lambda: fuzz.post(json.dumps(_transfer({"approved": True, "permit": "prm_x"}, 13))
                          .encode(), fuzz.headers(session=True)),
    ]
    for sent in sends:
        response = sent()
        (message,) = check(response, calls=True)
        result = message["result"]
        assert result["isError"] is True, result
        error = result["structuredContent"]["error"]
        assert error["code"] == "schema_invalid", error
        pointers = {item["pointer"] for item in error["details"]["errors"]}
        assert {"/arguments/approved", "/arguments/permit"} <= pointers, pointers
        assert Proposal.objects.count() == before


def _encoded(request: tuple[Any, dict[str, str]]) -> tuple[bytes, dict[str, str]]:
    body, headers = request
    return json.dumps(body).encode(), headers


def test_huge_bodies_batches_and_wrong_tokens_are_refused_before_any_call(fuzz: Fuzz) -> None:
    before = Proposal.objects.count()
    # A valid transfer inside a 2 MiB body: the SDK's limit answers before anything is parsed,
    # in a session, as an opening request, and streamed without a length.
    huge = json.dumps(_transfer({**TRANSFER, "memo": "m" * (2 * MIB)})).encode()
    for headers in (fuzz.headers(session=True), fuzz.headers()):
        response = fuzz.post(huge, headers)
        assert response.status_code == 413, response.text[:200]
    streamed = httpx2.post(fuzz.gateway.url, headers=fuzz.headers(session=True),
                           content=iter([huge[i:i + 64 * 1024]
                                         for i in range(0, len(huge), 64 * 1024)]), timeout=30)
    assert streamed.status_code == 413, streamed.text[:200]
    # Without a live token the gate answers first, whatever the size.
    assert fuzz.post(huge, fuzz.headers(auth="Bearer wrong")).status_code == 401
    # A batch (not served since 2025-06-18), even of valid calls, is a protocol error.
    lookup = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "crm.lookup", "arguments": {"customer_id": "cus-001"}}}
    for batch in ([_transfer(TRANSFER, 1), lookup], [lookup], []):
        for headers in (fuzz.headers(session=True), fuzz.headers()):
            response = fuzz.post(json.dumps(batch).encode(), headers)
            (message,) = check(response)
            assert response.status_code == 400 and "error" in message, response.text[:300]
    # A valid ungated call with a wrong token, or none, is 401, never a proposal.
    for auth in ("Bearer wrong-token", f"Bearer {fuzz.token}x", f"Basic {fuzz.token}",
                 f"Bearer {fuzz.token[:-1]}", "Bearer"):
        response = fuzz.post(json.dumps(lookup).encode(),
                             {**fuzz.headers(session=True), "Authorization": auth})
        assert response.status_code == 401, (auth, response.status_code)
    # Another path, other methods, an unknown session.
    other = httpx2.post(fuzz.gateway.url.replace("/mcp/", "/other/"), headers=fuzz.headers(),
                        content=b"{}")
    assert other.status_code == 404
    assert httpx2.put(fuzz.gateway.url, headers=fuzz.headers(), content=b"{}"
                      ).status_code == 405
    unknown = fuzz.post(json.dumps(lookup).encode(),
                        {**fuzz.headers(session=True), "Mcp-Session-Id": "0" * 32})
    assert unknown.status_code == 404
    assert Proposal.objects.count() == before
