"""The MCP gateway as its users run it: a gateway process (streamable HTTP, or stdio started by
the official client), a real Celery worker on Redis, the real destinations, and the test
database shared by every process.

The fixtures are imported by the conftest of each folder that uses them (tests/mcp,
tests/browser). `stack` starts the worker and points this process's own enqueues (an
operator's approval in the test, or through the live console) at it, so every handler runs on
the worker, never in a test process.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import World
from tests.support.destinations import Destinations, free_port
from tests.support.processes import ROOT, child_env
from tests.support.workers import WorkerPool, worker_pool

#: Short enough that a test of the waiting answer does not wait long.
WAIT_SECONDS = "3"


@dataclass
class Gateway:
    """An HTTP gateway process (`manage.py mcp_serve --http`); `restart` kills and starts it."""

    env: dict[str, str]
    log: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp/"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "mcp_serve", "--http", "--port", str(self.port)],
            cwd=ROOT, env=self.env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the gateway exited:\n{self.log.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"the gateway did not listen:\n{self.log.read_text()}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=15)
        self.proc = None

    def restart(self) -> None:
        """A crash and a new process: SIGKILL, then start again on the same port."""
        self.stop(signal.SIGKILL)
        self.start()


@dataclass
class Stack:
    world: World
    destinations: Destinations
    pool: WorkerPool
    env: dict[str, str]
    tmp: Path

    def stdio(self, token: str) -> Any:
        """The official client's parameters to start `mcp_serve --token` over stdio."""
        from mcp import StdioServerParameters

        return StdioServerParameters(command=sys.executable,
                                     args=[os.path.join(ROOT, "manage.py"), "mcp_serve", "--token",
                                           token],
                                     env=self.env, cwd=str(ROOT))


@pytest.fixture
def stack(live: World, destinations: Destinations, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    with worker_pool(tmp_path) as pool:
        pool.start()
        # An approval decided in this process claims and enqueues here: onto the worker's queue.
        monkeypatch.setattr("dispatch.queue.execute_now", pool.send)
        env = child_env(CELERY_BROKER_URL=pool.broker, CELERY_QUEUE=pool.queue,
                        MCP_WAIT_SECONDS=WAIT_SECONDS)
        yield Stack(live, destinations, pool, env, tmp_path)


@pytest.fixture
def gateway(stack: Stack) -> Iterator[Gateway]:
    running = Gateway(env=stack.env, log=stack.tmp / "gateway.log")
    running.start()
    try:
        yield running
    finally:
        running.stop()


@asynccontextmanager
async def http_client(url: str, token: str, *, mode: str = "auto",
                      **options: Any) -> AsyncIterator[Any]:
    """The official SDK's client over streamable HTTP with the agent's bearer token."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                           timeout=httpx2.Timeout(30, read=120)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, **options) as client,
    ):
        yield client
