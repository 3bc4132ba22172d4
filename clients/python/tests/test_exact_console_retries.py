"""The client through a rolling deploy: a real HTTP server, started by the test on a thread,
answers 503 or 429 or drops the connection, and `Client` and `AsyncClient` alike retry what is
safe to repeat, honour `Retry-After`, and never wait past the caller's timeout."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from exact_console import AsyncClient, Client, Denied, Timeout, TransportError
from exact_console._retry import Retry, parse_retry_after

PENDING = {"id": "prp_1", "approval": {"id": "apr_1", "state": "pending"},
           "operation_id": None}
GRANTED = {"id": "prp_1", "approval": {"id": "apr_1", "state": "granted"},
           "operation_id": "op_1"}
RATE_LIMITED = {"error": {"code": "budget_exhausted", "message": "Too many requests",
                          "details": {"reason": "rate limit", "retry_after": 1}}}
#: Tests ask for no jitter where they count the pauses; the rest keeps the default.
STEADY = Retry(jitter=0.0)


@dataclass
class Reply:
    """One scripted answer: a status, headers and a JSON body; or `drop`, which reads the
    request and closes the connection without a word (a web process killed mid-request);
    `stall` seconds of silence before it (a process stuck in a long request)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False
    stall: float = 0.0


class Server:
    """A threaded HTTP server answering each request with the next scripted `Reply` (the last
    one again once the script runs out), recording the method, path and time of each."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.seen: list[tuple[str, str, float]] = []
        self.request_ids: list[str | None] = []  # the `X-Request-ID` of each request
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                owner.seen.append((self.command, self.path, time.monotonic()))
                owner.request_ids.append(self.headers.get("X-Request-ID"))
                reply = owner.replies.pop(0) if len(owner.replies) > 1 else owner.replies[0]
                if reply.stall:
                    time.sleep(reply.stall)
                if reply.drop:
                    self.close_connection = True
                    return
                raw = b"" if reply.body is None else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_port}"

    def script(self, *replies: Reply) -> None:
        self.replies = list(replies)

    @property
    def paths(self) -> list[str]:
        return [path for _, path, _ in self.seen]


@pytest.fixture
def server() -> Iterator[Server]:
    serving = Server()
    thread = threading.Thread(target=serving.http.serve_forever, daemon=True)
    thread.start()
    try:
        yield serving
    finally:
        serving.http.shutdown()
        serving.http.server_close()
        thread.join(5)


@pytest.fixture(params=["sync", "async"])
def flavor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def use(flavor: str, server: Server | str, method: str, *args: Any, **kwargs: Any) -> Any:
    """`method` of a `Client` (sync) or an `AsyncClient` (async) to `server`, called once."""
    options = kwargs.pop("client_options", {})
    url = server if isinstance(server, str) else server.url
    if flavor == "sync":
        with Client(url, "eac_t", **options) as console:
            return getattr(console, method)(*args, **kwargs)

    async def main() -> Any:
        async with AsyncClient(url, "eac_t", **options) as console:
            return await getattr(console, method)(*args, **kwargs)

    return asyncio.run(main())


def ok(body: Any) -> Reply:
    return Reply(200, body)


def unavailable(**headers: str) -> Reply:
    return Reply(503, {"error": {"code": "persistence_failure", "message": "nothing ran",
                                 "details": {}}}, headers)


def proxy(status: int, **headers: str) -> Reply:
    """What a reverse proxy answers while the web process is away: not the API's JSON."""
    return Reply(status, {"message": "upstream unavailable"}, headers)


# --- waits ------------------------------------------------------------------------------------

def test_a_wait_survives_two_503s_then_answers(server: Server, flavor: str) -> None:
    server.script(proxy(503), unavailable(), ok(GRANTED))
    assert use(flavor, server, "wait_for_decision", "prp_1", timeout=10) == GRANTED
    assert server.paths == ["/api/v1/proposals/prp_1/"] * 3


def test_a_read_survives_503_twice_then_200(server: Server, flavor: str) -> None:
    server.script(proxy(503), proxy(502), ok({"id": "op_1", "state": "completed"}))
    assert use(flavor, server, "operation", "op_1") == {"id": "op_1", "state": "completed"}
    assert len(server.seen) == 3


def test_each_call_sends_a_request_id_of_its_own_the_same_on_each_retry(
        server: Server, flavor: str) -> None:
    server.script(proxy(503), proxy(502), ok({"id": "op_1"}), ok({"id": "op_2"}))
    if flavor == "sync":
        with Client(server.url, "eac_t") as console:
            console.operation("op_1")
            console.operation("op_2")
    else:
        async def main() -> None:
            async with AsyncClient(server.url, "eac_t") as console:
                await console.operation("op_1")
                await console.operation("op_2")

        asyncio.run(main())
    first, again, last, second = server.request_ids
    assert first is not None and re.fullmatch(r"[0-9a-f]{32}", first)
    assert first == again == last  # one call, three tries: one id
    assert second is not None and second != first  # the next call: its own


def test_a_429_is_retried_after_its_retry_after(server: Server, flavor: str) -> None:
    server.script(Reply(429, RATE_LIMITED, {"Retry-After": "1"}), ok(PENDING), ok(GRANTED))
    assert use(flavor, server, "wait_for_decision", "prp_1", timeout=10) == GRANTED
    first, second = server.seen[0][2], server.seen[1][2]
    assert second - first >= 1.0  # not sooner than the server asked


def test_a_dropped_connection_during_a_wait_is_read_again(server: Server, flavor: str) -> None:
    server.script(ok(PENDING), Reply(drop=True), Reply(drop=True), ok(GRANTED))
    assert use(flavor, server, "wait_for_decision", "prp_1", timeout=10) == GRANTED
    assert len(server.seen) == 4


def test_a_wait_through_an_outage_longer_than_its_timeout_ends_at_the_timeout(
        server: Server, flavor: str) -> None:
    server.script(ok(PENDING), proxy(503))
    # A first pause of 3 s, were it not cut at the deadline, would end the wait after 3.2 s.
    slow = Retry(first=3.0, most=3.0, jitter=0.0)
    started = time.monotonic()
    with pytest.raises(Timeout) as caught:
        use(flavor, server, "wait_for_decision", "prp_1", timeout=1.0,
            client_options={"retry": slow})
    took = time.monotonic() - started
    assert 1.0 <= took < 2.0  # never sleeps past the deadline
    waited = caught.value
    assert waited.code == "approval_pending"
    assert waited.last == PENDING  # the last answer seen
    assert "503" in str(waited)  # and what came after it
    assert isinstance(waited.error, TransportError)
    assert len(server.seen) == 3  # read, 503 at 0.2 s, 503 again at the deadline


def test_a_retry_after_past_the_deadline_ends_the_wait_at_once(
        server: Server, flavor: str) -> None:
    server.script(proxy(503, **{"Retry-After": "120"}))
    started = time.monotonic()
    with pytest.raises(Timeout) as caught:
        use(flavor, server, "wait_for_decision", "prp_1", timeout=5)
    assert time.monotonic() - started < 1.0  # asked for 120 s, 5 s left: no use waiting
    assert caught.value.code == "console_unreachable"  # no answer was ever read
    assert caught.value.last == {}
    assert "Retry-After" in str(caught.value)
    assert len(server.seen) == 1


def test_a_read_that_hangs_is_cut_at_the_waits_deadline(server: Server, flavor: str) -> None:
    # The client's own request timeout is 10 s; a wait of 0.5 s gives its last read at most
    # one second more.
    server.script(ok(PENDING), Reply(stall=5.0, body=GRANTED))
    started = time.monotonic()
    with pytest.raises(Timeout) as caught:
        use(flavor, server, "wait_for_decision", "prp_1", timeout=0.5)
    assert time.monotonic() - started < 2.5
    assert caught.value.last == PENDING
    assert "ReadTimeout" in str(caught.value)


def test_a_wait_for_outcome_survives_a_restart(server: Server, flavor: str) -> None:
    done = {"id": "op_1", "state": "completed", "result": {}}
    server.script(ok({"id": "op_1", "state": "running"}), Reply(drop=True), proxy(502),
                  proxy(504), ok(done))
    assert use(flavor, server, "wait_for_outcome", "op_1", timeout=10) == done


# --- single calls -----------------------------------------------------------------------------

def test_a_call_that_is_not_idempotent_is_not_sent_again_after_a_503(
        server: Server, flavor: str) -> None:
    server.script(proxy(503), ok({"operation_id": "op_1", "state": "queued"}))
    with pytest.raises(TransportError, match="503"):
        use(flavor, server, "dispatch", "prp_1")
    assert len(server.seen) == 1


def test_a_rate_limited_call_is_sent_again_whatever_it_is(server: Server, flavor: str) -> None:
    # A throttled request is refused before the view runs: nothing happened, any call may go
    # again.
    server.script(Reply(429, RATE_LIMITED, {"Retry-After": "0"}),
                  ok({"operation_id": "op_1", "state": "queued"}))
    assert use(flavor, server, "dispatch", "prp_1") == {"operation_id": "op_1",
                                                        "state": "queued"}
    assert len(server.seen) == 2


def test_a_spent_budget_is_a_refusal_not_a_retry(server: Server, flavor: str) -> None:
    server.script(Reply(429, {"error": {"code": "budget_exhausted", "message": "spent",
                                        "details": {"budget": "cap"}}}))
    with pytest.raises(Denied) as caught:
        use(flavor, server, "propose", "payments.transfer", {}, call_id="c-1")
    assert caught.value.code == "budget_exhausted"
    assert len(server.seen) == 1


def test_a_keyed_proposal_survives_a_restart(server: Server, flavor: str) -> None:
    server.script(Reply(drop=True), proxy(502), ok(PENDING))
    assert use(flavor, server, "propose", "email.send", {}, call_id="c-1") == PENDING
    assert len(server.seen) == 3


def test_a_single_call_gives_up_after_its_retries_naming_what_it_saw(
        server: Server, flavor: str) -> None:
    server.script(proxy(503))
    with pytest.raises(TransportError, match=r"503.*tried 3 times"):
        use(flavor, server, "proposal", "prp_1",
            client_options={"retry": STEADY})
    assert len(server.seen) == 3


def test_a_single_call_does_not_wait_longer_than_it_may(server: Server, flavor: str) -> None:
    server.script(proxy(503, **{"Retry-After": "3600"}))
    started = time.monotonic()
    with pytest.raises(TransportError, match="Retry-After"):
        use(flavor, server, "proposal", "prp_1")
    assert time.monotonic() - started < 1.0
    assert len(server.seen) == 1


# --- the policy, pure -------------------------------------------------------------------------

def test_retry_after_in_seconds_and_as_an_http_date() -> None:
    now = datetime(2026, 12, 7, 18, 0, tzinfo=UTC)
    assert parse_retry_after("7", now=now) == 7.0
    assert parse_retry_after(format_datetime(now + timedelta(seconds=90), usegmt=True),
                             now=now) == 90.0
    assert parse_retry_after(format_datetime(now - timedelta(seconds=5), usegmt=True),
                             now=now) == 0.0
    assert parse_retry_after("soon", now=now) is None
    assert parse_retry_after(None, now=now) is None


def test_backoff_grows_is_capped_and_jittered_within_bounds() -> None:
    steady = Retry(jitter=0.0)
    assert [steady.backoff(n, draw=0.5) for n in range(7)] == pytest.approx(
        [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0])
    jittered = Retry(jitter=0.5)
    assert jittered.backoff(3, draw=0.0) == pytest.approx(0.8)
    assert jittered.backoff(3, draw=0.999) == pytest.approx(1.6, rel=0.01)


@pytest.mark.parametrize("wrong", [{"jitter": 1.5}, {"attempts": -1}, {"first": -0.1}])
def test_a_policy_out_of_bounds_is_refused(wrong: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r">= 0|jitter"):
        Retry(**wrong)


def test_an_http_date_retry_after_is_honoured(server: Server,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    when = datetime.now(UTC) + timedelta(seconds=3)
    server.script(proxy(503, **{"Retry-After": format_datetime(when, usegmt=True)}),
                  ok({"id": "op_1"}))
    with Client(server.url, "t") as console:
        assert dict(console.operation("op_1")) == {"id": "op_1"}
    [pause] = slept
    assert 1.5 <= pause <= 3.0


def test_an_unexpected_transport_failure_is_wrapped(flavor: str) -> None:
    # A port nobody listens on: refused at every try, then a TransportError, not httpx's.
    with pytest.raises(TransportError, match="tried 3 times"):
        use(flavor, "http://127.0.0.1:9", "proposal", "prp_1",
            client_options={"retry": Retry(first=0.01)})


def test_retries_sets_the_policys_attempts() -> None:
    with Client("http://127.0.0.1:9", "t", retries=5) as console:
        assert console.retry.attempts == 5
