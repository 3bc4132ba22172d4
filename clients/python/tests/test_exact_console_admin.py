"""The approvals list and an admin's calls (docs/rest-api.md#admin) against a scripted console:
the requests `Client` and `AsyncClient` send, the same for both, what they answer, and that a
write is never sent twice."""

from __future__ import annotations

import asyncio
import json
import typing
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from exact_console import AsyncClient, Client, Denied, Retry, TransportError, shapes

ROOT = "http://console.test"

#: (method, call as (name, args, kwargs), the request it sends: method, path, body or None)
CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any], str, str, Any]] = [
    ("approvals", (), {}, "GET", "/api/v1/approvals/", None),
    ("approvals", (), {"state": "expired", "cursor": "abc", "page_size": 5}, "GET",
     "/api/v1/approvals/?state=expired&cursor=abc&page_size=5", None),
    ("approval", ("apr_1",), {}, "GET", "/api/v1/approvals/apr_1/", None),
    ("create_agent", ("bot",), {"tools": ["crm.lookup"]}, "POST", "/api/v1/agents/",
     {"name": "bot", "tools": ["crm.lookup"]}),
    ("rotate_agent_token", ("prn_1",), {}, "POST", "/api/v1/agents/prn_1/token/", None),
    ("create_grant", ("bot", "crm.lookup"), {"scope": {"customer": "*"}}, "POST",
     "/api/v1/grants/", {"subject": "bot", "operation": "crm.lookup",
                         "scope": {"customer": "*"}}),
    ("create_grant", ("bot", "crm.lookup"),
     {"scope": {}, "expires_at": "2999-01-01T00:00:00Z"}, "POST", "/api/v1/grants/",
     {"subject": "bot", "operation": "crm.lookup", "scope": {},
      "expires_at": "2999-01-01T00:00:00Z"}),
    ("revoke_grant", ("grt_1",), {}, "DELETE", "/api/v1/grants/grt_1/", None),
    ("pause", (), {}, "POST", "/api/v1/pauses/", {}),
    ("pause", (), {"operation": "crm.lookup", "agent": "bot", "reason": "why"}, "POST",
     "/api/v1/pauses/", {"operation": "crm.lookup", "agent": "bot", "reason": "why"}),
    ("resume", ("pau_1",), {}, "DELETE", "/api/v1/pauses/pau_1/", None),
]

#: What the scripted console answers each method with (status, body or None).
ANSWERS: dict[str, tuple[int, Any]] = {
    "approvals": (200, {"results": [], "next": None, "previous": None}),
    "approval": (200, {"id": "apr_1", "canonical": "{}"}),
    "create_agent": (201, {"id": "prn_1", "name": "bot", "token": "eac_x"}),
    "rotate_agent_token": (201, {"token": "eac_y"}),
    "create_grant": (201, {"id": "grt_1"}),
    "revoke_grant": (204, None),
    "pause": (201, {"id": "pau_1"}),
    "resume": (204, None),
}


class Recorder:
    """Answers every request with `answer` and keeps what was sent."""

    def __init__(self, status: int, body: Any) -> None:
        self.status, self.body = status, body
        self.sent: list[tuple[str, str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.method, request.url.raw_path.decode(),
                          json.loads(request.content) if request.content else None))
        if self.body is None:
            return httpx.Response(self.status)
        return httpx.Response(self.status, json=self.body)


def run_sync(recorder: Recorder, method: str, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
    with Client(ROOT, "eac_admin", transport=httpx.MockTransport(recorder)) as client:
        return getattr(client, method)(*args, **kwargs)


def run_async(recorder: Recorder, method: str, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> Any:
    async def main() -> Any:
        async with AsyncClient(ROOT, "eac_admin",
                               transport=httpx.MockTransport(recorder)) as client:
            return await getattr(client, method)(*args, **kwargs)

    return asyncio.run(main())


RUNNERS: dict[str, Callable[[Recorder, str, tuple[Any, ...], dict[str, Any]], Any]] = {
    "sync": run_sync, "async": run_async}


@pytest.mark.parametrize("runner", list(RUNNERS))
@pytest.mark.parametrize(("method", "args", "kwargs", "verb", "path", "body"), CALLS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CALLS)])
def test_each_call_sends_its_request_and_answers_its_body(
    runner: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], verb: str,
    path: str, body: Any,
) -> None:
    status, answer = ANSWERS[method]
    recorder = Recorder(status, answer)
    got = RUNNERS[runner](recorder, method, args, kwargs)
    assert recorder.sent == [(verb, path, body)]
    assert got == answer  # a 204 answers None


@pytest.mark.parametrize("runner", list(RUNNERS))
@pytest.mark.parametrize("method", ["create_agent", "rotate_agent_token", "create_grant",
                                    "revoke_grant", "pause", "resume"])
def test_a_write_whose_answer_was_lost_is_not_sent_again(runner: str, method: str) -> None:
    """It may have had its effect (a second agent, a second token): look it up instead."""
    args, kwargs = next((c[1], c[2]) for c in CALLS if c[0] == method)
    recorder = Recorder(503, {"detail": "a proxy's page"})
    with pytest.raises(TransportError):
        RUNNERS[runner](recorder, method, args, kwargs)
    assert len(recorder.sent) == 1


@pytest.mark.parametrize("runner", list(RUNNERS))
def test_the_list_is_read_again_after_a_503(runner: str) -> None:
    answers = [httpx.Response(503), httpx.Response(200, json={"results": [], "next": None})]
    sent = []

    def console(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        return answers.pop(0)

    if runner == "sync":
        with Client(ROOT, "t", transport=httpx.MockTransport(console),
                    retry=_quick()) as client:
            assert client.approvals()["results"] == []
    else:
        async def main() -> Any:
            async with AsyncClient(ROOT, "t", transport=httpx.MockTransport(console),
                                   retry=_quick()) as client:
                return await client.approvals()

        assert asyncio.run(main())["results"] == []
    assert sent == ["/api/v1/approvals/", "/api/v1/approvals/"]


def _quick() -> Retry:
    return Retry(first=0.0, most=0.0)


@pytest.mark.parametrize("runner", list(RUNNERS))
def test_a_refusal_is_denied(runner: str) -> None:
    recorder = Recorder(403, {"error": {"code": "role_required", "message": "admins only",
                                        "details": {"role": "admin"}}})
    with pytest.raises(Denied) as refused:
        RUNNERS[runner](recorder, "create_agent", ("bot",), {"tools": []})
    assert (refused.value.code, refused.value.status, refused.value.details) == (
        "role_required", 403, {"role": "admin"})


ANNOTATED = {
    "approvals": shapes.ApprovalsPage, "approval": shapes.Approval,
    "create_agent": shapes.AgentCreated, "rotate_agent_token": shapes.AgentToken,
    "create_grant": shapes.Grant, "revoke_grant": type(None), "pause": shapes.Pause,
    "resume": type(None),
}


@pytest.mark.parametrize("client", [Client, AsyncClient])
@pytest.mark.parametrize(("method", "shape"), sorted(ANNOTATED.items()))
def test_each_answer_is_annotated_with_its_shape(client: type, method: str,
                                                 shape: type) -> None:
    assert typing.get_type_hints(getattr(client, method))["return"] is shape


def test_the_shapes_are_the_documented_keys() -> None:
    item = {"id", "state", "proposal_id", "operation", "summary", "digest", "requested_by",
            "expires_at", "quorum", "votes"}
    assert set(shapes.ApprovalItem.__annotations__) == item
    assert set(typing.get_type_hints(shapes.Approval)) == item | {"canonical"}
    assert set(shapes.AgentCreated.__annotations__) == {"id", "name", "token"}
    assert set(shapes.Pause.__annotations__) == {"id", "scope", "operation", "agent", "reason",
                                                 "paused_by", "paused_at"}
    assert set(shapes.Grant.__annotations__) == {"id", "issuer", "subject", "operations",
                                                 "scope", "not_before", "expires_at",
                                                 "revoked_at", "parent_id", "budget"}

