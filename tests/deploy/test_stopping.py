"""Long-running commands stop cleanly on SIGTERM and SIGINT (docs/deployment.md#rollout).

A container's command is PID 1 of its PID namespace, where a signal without a handler is
dropped: `docker stop` then waits out the grace period and SIGKILLs. Each command runs here both
ways: as PID 1 of a PID namespace of its own (`unshare --pid --fork --mount-proc`, as root), and
as a plain process; the signal comes from outside the namespace, as the engine sends it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.compose import answers, wait_for
from tests.support.destinations import free_port
from tests.support.processes import ROOT, database_url, python_path

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

#: How soon after the signal a waiting command must have exited.
PROMPTLY = 1.0


def namespaces_work() -> bool:
    try:
        return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                              capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def command_env(tmp_path: Path) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "PYTHONPATH": python_path(),
            "DJANGO_SETTINGS_MODULE": "config.test_settings", "DATABASE_URL": database_url(),
            "APP_VAR_DIR": str(tmp_path / "var"), "PYTHONUNBUFFERED": "1"}


def children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(word) for word in text.split()]


def namespace_pids(pid: int) -> list[int]:
    """The process's PID in each namespace it is in, outermost first (`NSpid`)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return [int(word) for word in line.split()[1:]]
    raise AssertionError(f"no NSpid for {pid}")


class Started:
    """A command started as PID 1 of its own PID namespace, or as a plain process."""

    def __init__(self, words: list[str], tmp_path: Path, *, as_pid_1: bool,
                 **extra: str) -> None:
        self.log = tmp_path / "output.log"
        prefix = ["unshare", "--pid", "--fork", "--mount-proc"] if as_pid_1 else []
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen([*prefix, *words], cwd=ROOT,
                                         env={**command_env(tmp_path), **extra}, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.target = self.proc.pid
        if as_pid_1:
            # unshare forks the command and waits for it (ignoring SIGTERM itself): the engine
            # signals the command, the namespace's PID 1.
            wait_for(lambda: children(self.proc.pid), 30, "unshare's child")
            self.target = children(self.proc.pid)[0]
            assert namespace_pids(self.target) == [self.target, 1]

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop_within(self, signum: int, *, then: Callable[[], object] = lambda: None,
                    ) -> tuple[float, int]:
        """Send `signum` (and do `then`); the seconds until the command had exited, and its
        status."""
        sent = time.monotonic()
        os.kill(self.target, signum)
        then()
        try:
            status = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            raise AssertionError(f"still running 15 s after {signal.Signals(signum).name}:\n"
                                 f"{self.output()[-3000:]}") from None
        return time.monotonic() - sent, status

    def kill(self) -> None:
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def reconciler(tmp_path: Path) -> tuple[list[str], Callable[[Started], bool]]:
    # A pass every 30 s: the signal arrives while it waits for the next one.
    words = [sys.executable, "manage.py", "reconcile", "--every", "30"]
    return words, lambda started: '"unknown"' in started.output()


def mcp_gateway(tmp_path: Path) -> tuple[list[str], Callable[[Started], bool]]:
    port = free_port()
    words = [sys.executable, "manage.py", "mcp_serve", "--http", "--port", str(port)]
    return words, lambda started: answers(f"http://127.0.0.1:{port}/healthz")


COMMANDS = {"reconcile --every": reconciler, "mcp_serve --http": mcp_gateway}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("as_pid_1", [True, False], ids=["pid-1", "plain"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_waiting_command_exits_promptly_with_status_0(
    tmp_path: Path, command: str, as_pid_1: bool, signum: int,
) -> None:
    if as_pid_1 and not namespaces_work():
        pytest.skip("unshare --pid needs root (CAP_SYS_ADMIN) here")
    words, ready = COMMANDS[command](tmp_path)
    started = Started(words, tmp_path, as_pid_1=as_pid_1)
    try:
        wait_for(lambda: ready(started), 90, f"{command} to be up",
                 watch=[started])  # type: ignore[list-item]
        seconds, status = started.stop_within(signum)
    finally:
        started.kill()
    assert status == 0, started.output()[-3000:]
    assert seconds < PROMPTLY, f"{command} took {seconds:.2f} s to exit"


@pytest.mark.parametrize("signals", [1, 2], ids=["finishes-the-pass", "abandons-the-pass"])
def test_a_signal_during_a_pass(tmp_path: Path, signals: int) -> None:
    """One signal while a pass runs: the pass finishes (its JSON line), then status 0. A second
    one abandons it at once: non-zero, no line, and the pass's lease is free for the next."""
    from django.utils import timezone

    from dispatch.services.reconciliation import reconcile_operations

    pause = tmp_path / "pause"
    pause.mkdir()
    words, _ = reconciler(tmp_path)
    started = Started(words, tmp_path, as_pid_1=True, DISPATCH_PAUSE_DIR=str(pause),
                      DISPATCH_PAUSE_AT="reconcile.pass_leased", DISPATCH_PAUSE_TIMEOUT="60")
    reached = pause / "reconcile.pass_leased.reached"
    try:
        wait_for(reached.exists, 90, "the pass to hold its lease",
                 watch=[started])  # type: ignore[list-item]
        if signals == 1:
            def go_on() -> None:
                time.sleep(0.5)
                assert started.alive(), "left the pass it was in"
                (pause / "reconcile.pass_leased.go").write_text("")

            seconds, status = started.stop_within(signal.SIGTERM, then=go_on)
        else:
            os.kill(started.target, signal.SIGTERM)
            time.sleep(0.5)
            assert started.alive(), started.output()
            seconds, status = started.stop_within(signal.SIGTERM)
    finally:
        started.kill()
    lines = [line for line in started.output().splitlines() if line.startswith("{")]
    if signals == 1:
        assert status == 0, started.output()[-3000:]
        assert len(lines) == 1 and '"unknown": 0' in lines[0], started.output()
    else:
        assert status != 0 and seconds < PROMPTLY, (status, seconds, started.output())
        assert lines == [], started.output()
    # Either way the lease went with the pass: the next pass runs now, not in 30 s.
    assert "skipped" not in reconcile_operations(now=timezone.now())
