"""Run the demo destinations (SMTP sink and bank) as a real subprocess for a test."""

from __future__ import annotations

import os
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

    def settings(self) -> dict[str, object]:
        return {"dir": str(self.directory), "smtp_host": "127.0.0.1",
                "smtp_port": self.smtp_port, "bank_url": self.bank_url}

    def env(self) -> dict[str, str]:
        return {"DESTINATIONS_DIR": str(self.directory), "SMTP_SINK_PORT": str(self.smtp_port),
                "BANK_URL": self.bank_url}


@contextmanager
def running_destinations(directory: Path, *, hang_seconds: float = 30.0) -> Iterator[Destinations]:
    found = Destinations(directory, free_port(), free_port())
    directory.mkdir(parents=True, exist_ok=True)
    log = (directory / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dispatch.destinations", "--dir", str(directory),
         "--smtp-port", str(found.smtp_port), "--bank-port", str(found.bank_port),
         "--hang-seconds", str(hang_seconds)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 20
        line = proc.stdout.readline()
        while "destinations ready" not in line:
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                raise RuntimeError(f"destinations did not start: {line}"
                                   f"{(directory / 'server.log').read_text()}")
            line = proc.stdout.readline()
        yield found
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
