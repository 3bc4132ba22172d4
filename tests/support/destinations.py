"""Run the demo destinations (SMTP sink; bank, publisher and sources on one HTTP port) as a real
subprocess for a test."""

from __future__ import annotations

import os
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Destinations:
    directory: Path
    smtp_port: int
    bank_port: int

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
        return {"dir": str(self.directory), "smtp_host": "127.0.0.1",
                "smtp_port": self.smtp_port, "bank_url": self.bank_url,
                "publisher_url": self.publisher_url, "sources_url": self.sources_url}

    def env(self) -> dict[str, str]:
        return {"DESTINATIONS_DIR": str(self.directory), "SMTP_SINK_PORT": str(self.smtp_port),
                "BANK_URL": self.bank_url}


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


@contextmanager
def running_destinations(
    directory: Path, *, hang_seconds: float = 30.0, smtp_port: int | None = None,
    bank_port: int | None = None,
) -> Iterator[Destinations]:
    """Start the destinations on free ports, or on the ports given (a test that needs the bank
    to be down at first reserves a port, then starts it there)."""
    found = Destinations(directory, smtp_port or free_port(), bank_port or free_port())
    directory.mkdir(parents=True, exist_ok=True)
    log = (directory / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "demo.destinations", "--dir", str(directory),
         "--smtp-port", str(found.smtp_port), "--bank-port", str(found.bank_port),
         "--hang-seconds", str(hang_seconds)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 20
        line = read_line(proc, deadline)
        while line is None or "destinations ready" not in line:
            if line is None or proc.poll() is not None:
                log.flush()
                raise RuntimeError(f"destinations did not start: {line or ''}"
                                   f"{(directory / 'server.log').read_text()}")
            line = read_line(proc, deadline)
        yield found
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
