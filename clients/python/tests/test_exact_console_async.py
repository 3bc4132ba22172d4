"""`AsyncClient` against a scripted console: the same calls, refusals, retries and waits as
`Client`'s, as coroutines."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

import exact_console
from exact_console import AsyncClient, Denied, Timeout, TransportError

ROOT = "http://console.test"
Answer = httpx.Response | Exception
Run = Callable[[AsyncClient], Awaitable[Any]]


class Script:
    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    @property
    def sent(self) -> list[tuple[str, str]]:
        return [(r.method, r.url.raw_path.decode()) for r in self.requests]


def ok(body: dict[str, Any], status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=body)


def run(script: Script, use: Run, **options: Any) -> Any:
    async def main() -> Any:
        async with AsyncClient(ROOT, "eac_secret", transport=httpx.MockTransport(script),
                               **options) as console:
            return await use(console)

    return asyncio.run(main())


def test_calls_and_their_answers() -> None:
    script = Script(ok({"results": []}), ok({"id": "prp_1"}, 201), ok({"operation_id": "op_1",
                                                                       "state": "claimed"}))

    async def use(console: AsyncClient) -> list[Any]:
        return [await console.contracts(),
                await console.propose("crm.lookup", {"customer_id": "c"}, call_id="k-1",
                                      dispatch_on_approval=True),
                await console.dispatch("prp_1", permit="prm_1")]

    assert run(script, use) == [{"results": []}, {"id": "prp_1"},
                                {"operation_id": "op_1", "state": "claimed"}]
    assert script.sent == [("GET", "/api/v1/contracts/"), ("POST", "/api/v1/proposals/"),
                           ("POST", "/api/v1/proposals/prp_1/dispatch/")]
    assert script.requests[0].headers["Authorization"] == "Bearer eac_secret"
    assert json.loads(script.requests[1].content) == {
        "operation": "crm.lookup", "arguments": {"customer_id": "c"}, "call_id": "k-1",
        "dispatch_on_approval": True}
    assert json.loads(script.requests[2].content) == {"permit": "prm_1"}


def test_a_refusal_is_denied() -> None:
    script = Script(httpx.Response(409, json={"error": {
        "code": "proposal_mismatch", "message": "call-1 was used for another action",
        "details": {"call_id": "call-1"}}}))

    async def use(console: AsyncClient) -> Any:
        return await console.propose("crm.lookup", {}, call_id="call-1")

    with pytest.raises(Denied) as caught:
        run(script, use)
    assert (caught.value.status, caught.value.code, caught.value.details) == (
        409, "proposal_mismatch", {"call_id": "call-1"})
    assert len(script.requests) == 1


def test_reads_and_keyed_proposals_are_retried_the_rest_is_not() -> None:
    script = Script(httpx.ConnectError("refused"), ok({"id": "op_1"}),
                    httpx.ReadTimeout("lost"), ok({"id": "prp_1"}))

    async def retried(console: AsyncClient) -> list[Any]:
        return [await console.operation("op_1"),
                await console.propose("crm.lookup", {}, call_id="k")]

    assert run(script, retried) == [{"id": "op_1"}, {"id": "prp_1"}]
    assert len(script.requests) == 4

    script = Script(httpx.ReadTimeout("lost"), ok({}))

    async def dispatch(console: AsyncClient) -> Any:
        return await console.dispatch("prp_1")

    with pytest.raises(TransportError, match="tried once"):
        run(script, dispatch)
    assert len(script.requests) == 1

    script = Script(*[httpx.ConnectError("refused") for _ in range(3)])

    async def read(console: AsyncClient) -> Any:
        return await console.proposal("prp_1")

    with pytest.raises(TransportError, match="tried 2 times"):
        run(script, read, retries=1)
    assert len(script.requests) == 2


def test_waits_answer_when_settled_and_time_out_otherwise() -> None:
    pending = {"id": "prp_1", "approval": {"id": "apr_1", "state": "pending"}}
    granted = {"id": "prp_1", "approval": {"id": "apr_1", "state": "granted"},
               "operation_id": "op_1"}
    done = {"id": "op_1", "state": "completed", "result": {"n": 1}}
    script = Script(ok(pending), ok(granted), ok({"id": "op_1", "state": "claimed"}), ok(done))

    async def use(console: AsyncClient) -> list[Any]:
        decided = await console.wait_for_decision("prp_1", timeout=5)
        return [decided, await console.wait_for_outcome(str(decided["operation_id"]),
                                                        timeout=5)]

    assert run(script, use) == [granted, done]

    script = Script(*[ok({"id": "op_1", "state": "claimed"}) for _ in range(20)])

    async def wait(console: AsyncClient) -> Any:
        return await console.wait_for_outcome("op_1", timeout=0.5)

    started = time.monotonic()
    with pytest.raises(Timeout) as caught:
        run(script, wait)
    assert 0.5 <= time.monotonic() - started < 1.5
    assert (caught.value.code, caught.value.last["state"]) == ("claimed", "claimed")
    assert 2 <= len(script.requests) <= 4

    script = Script(*[ok(pending) for _ in range(20)])

    async def decision(console: AsyncClient) -> Any:
        return await console.wait_for_decision("prp_1", timeout=0.3)

    with pytest.raises(Timeout) as caught:
        run(script, decision)
    assert caught.value.code == "approval_pending"


def test_the_async_client_has_the_sync_clients_methods() -> None:
    public = {name for name in dir(exact_console.Client) if not name.startswith("_")
              and callable(getattr(exact_console.Client, name))}
    public -= {"close"}
    assert public <= set(dir(AsyncClient))
    for name in public:
        method = getattr(AsyncClient, name)
        assert asyncio.iscoroutinefunction(method), name


def test_tools_from_an_async_clients_contracts() -> None:
    contracts = {"results": [{"name": "crm.lookup", "version": 1, "input_schema": {},
                              "effects": ["read"], "approval": None}]}
    script = Script(ok(contracts))

    async def use(console: AsyncClient) -> Any:
        return exact_console.tools(await console.contracts())

    [lookup] = run(script, use)
    assert (lookup.name, lookup.needs_approval) == ("crm.lookup", False)
