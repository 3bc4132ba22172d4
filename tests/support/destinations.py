"""Run the demo destinations (SMTP sink and its HTTP lookup; bank, publisher and sources on one
HTTP port) as a real subprocess for a test."""

from __future__ import annotations

import os
import random
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import python_path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A loopback port free now, drawn below the kernel's ephemeral range (32768 and up on
    Linux): a port the kernel handed out for port 0 is also what it hands to the next outgoing
    connection, so a server started there a moment later could find it taken (seen in CI, with
    the SQLite and PostgreSQL passes running side by side)."""
    rng = random.SystemRandom()
    for _ in range(100):
        port = rng.randrange(20000, 32768)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port between 20000 and 32767")


@dataclass(frozen=True)
class Destinations:
    directory: Path
    smtp_port: int
    bank_port: int
    lookup_port: int

    @property
    def smtp_lookup_url(self) -> str:
        return f"http://127.0.0.1:{self.lookup_port}"

    @property
    def bank_url(self) -> str:
        return f"http://127.0.0.1:{self.bank_port}"

    @property
    def publisher_url(self) -> str:
        return self.bank_url

    @property
    def sources_url(self) -> str:
        return f"{self.bank_url}/sources"

    def settings(self) -> dict[str, object]:
        return {"dir": str(self.directory), "bind": "127.0.0.1", "smtp_host": "127.0.0.1",
                "smtp_port": self.smtp_port, "smtp_lookup_url": self.smtp_lookup_url,
                "bank_url": self.bank_url, "publisher_url": self.publisher_url,
                "sources_url": self.sources_url}

    def env(self) -> dict[str, str]:
        return {"DESTINATIONS_DIR": str(self.directory), "SMTP_SINK_HOST": "127.0.0.1",
                "SMTP_SINK_PORT": str(self.smtp_port),
                "SMTP_SINK_LOOKUP_URL": self.smtp_lookup_url, "BANK_URL": self.bank_url}


def read_line(process: subprocess.Popen[str], deadline: float) -> str | None:
    """The next stdout line of `process`, or None if none comes before `deadline` (a plain
    readline would wait for ever on a child that starts but never prints)."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not selector.select(remaining):
            return None
    return str(process.stdout.readline())


def _start(found: Destinations, hang_seconds: float, keys: Path | None) -> subprocess.Popen[str]:
    """Start the destinations process on `found`'s ports and wait for its ready line."""
    directory = found.directory
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "server.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "demo.destinations", "--dir", str(directory),
             "--smtp-port", str(found.smtp_port), "--bank-port", str(found.bank_port),
             "--lookup-port", str(found.lookup_port),
             "--hang-seconds", str(hang_seconds), *(["--keys", str(keys)] if keys else [])],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True,
            env={**os.environ, "PYTHONPATH": python_path()},
        )
    deadline = time.monotonic() + 20
    line = read_line(proc, deadline)
    while line is None or "destinations ready" not in line:
        if line is None or proc.poll() is not None:
            _stop(proc)
            raise RuntimeError(f"destinations did not start: {line or ''}"
                               f"{(directory / 'server.log').read_text()}")
        line = read_line(proc, deadline)
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextmanager
def running_destinations(
    directory: Path, *, hang_seconds: float = 30.0, smtp_port: int | None = None,
    bank_port: int | None = None, lookup_port: int | None = None, keys: Path | None = None,
) -> Iterator[Destinations]:
    """Start the destinations on free ports, or on the ports given (a test that needs the bank
    to be down at first reserves a port, then starts it there). `keys`: a JWKS file the bank and
    the publisher verify permit tokens with (docs/permit-tokens.md), re-read on every request.

    A port found free can be taken before the child binds it (an outgoing connection of a
    concurrent test gets the same ephemeral port): the start is then tried again on fresh
    ports, up to five times; a port the caller gave is never changed."""
    for attempt in range(5):
        found = Destinations(directory, smtp_port or free_port(), bank_port or free_port(),
                             lookup_port or free_port())
        try:
            proc = _start(found, hang_seconds, keys)
            break
        except RuntimeError as error:
            # The child's OSError says "Address already in use": compared without case.
            if "address already in use" not in str(error).lower() or attempt == 4:
                raise
    try:
        yield found
    finally:
        _stop(proc)
