"""The console as production runs it: gunicorn (which reads gunicorn.conf.py from the project
root) serving config.wsgi in a process of its own, its output kept in a file."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.destinations import free_port
from tests.support.processes import ROOT


@dataclass
class WebServer:
    env: dict[str, str]
    log: Path
    workers: int = 2
    args: list[str] = field(default_factory=list)  # more of gunicorn's options
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        gunicorn = os.path.join(os.path.dirname(sys.executable), "gunicorn")
        self.proc = subprocess.Popen(
            [gunicorn, "config.wsgi", "--bind", f"127.0.0.1:{self.port}",
             "--workers", str(self.workers), "--timeout", "120", *self.args],
            cwd=ROOT, env=self.env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"gunicorn exited:\n{self.log.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"gunicorn did not listen:\n{self.log.read_text()}")

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as error:
            return int(error.code), bytes(error.read())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.proc = None
