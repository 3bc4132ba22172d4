"""`scripts/run.sh` for real, on its own database, broker and ports: run again, it reuses the demo
agent and its token and the queue does not grow; a plain `kill` (SIGTERM) or Ctrl-C (SIGINT) of
the script leaves no process of it behind."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.destinations import free_port

pytestmark = pytest.mark.slow  # two full starts of everything, a minute or two

ROOT = Path(__file__).resolve().parents[2]
TOKEN = re.compile(r"^Agent 'support-bot' bearer token: (\S+)$", re.M)
#: What the first start leaves waiting: the seed's four (two refunds, the large payment, the
#: stale proposal), the support agent's email and the research agent's publication.
PENDING = 6
START_SECONDS = 240.0
#: The script's own grace (STOP_GRACE, 8 s) before SIGKILL, and a little more.
STOP_SECONDS = 12.0


@dataclass
class Run:
    process: subprocess.Popen[bytes]
    output: Path
    var_dir: Path

    def printed(self) -> str:
        return self.output.read_text(errors="replace")

    def log(self, name: str) -> str:
        path = self.var_dir / "log" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def environment(var_dir: Path) -> dict[str, str]:
    """Nothing of the test run's settings: a database, broker and ports of its own."""
    return {
        "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8",
        "APP_VAR_DIR": str(var_dir), "PORT": str(free_port()), "MCP_PORT": str(free_port()),
        "SMTP_SINK_PORT": str(free_port()), "BANK_URL": f"http://127.0.0.1:{free_port()}",
        "SMTP_SINK_LOOKUP_URL": f"http://127.0.0.1:{free_port()}",
    }


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def processes_of(var_dir: Path) -> set[int]:
    """Every live process whose environment names this run's APP_VAR_DIR: the script, and all
    it started (they inherit it), whatever became of their parents."""
    marker = f"APP_VAR_DIR={var_dir}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with suppress(OSError):
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.add(int(entry.name))
    return found


def wait_for(condition: Callable[[], bool], seconds: float, what: str, run: Run) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if run.process.poll() is not None:
            pytest.fail(f"run.sh exited ({run.process.returncode}) before {what}:\n"
                        f"{run.printed()}\n{run.log('worker')[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {seconds} s:\n{run.printed()}\n"
                        f"agent: {run.log('agent')}\nresearch: {run.log('research')}")
        time.sleep(0.5)


def serves(env: dict[str, str]) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{env['PORT']}/accounts/login/",
                                    timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def pending(var_dir: Path) -> int:
    with sqlite3.connect(var_dir / "console.sqlite3", timeout=10) as db:
        row = db.execute("SELECT count(*) FROM dispatch_approvalrequest "
                         "WHERE state = 'pending'").fetchone()
    return int(row[0])


@contextmanager
def started(env: dict[str, str], var_dir: Path, name: str) -> Iterator[Run]:
    output = var_dir.parent / f"{name}.out"
    with output.open("wb") as out:
        # SIGINT as a terminal delivers it: a shell that starts a job in the background
        # without job control (`pytest ... &` in a script) ignores SIGINT in it, bash cannot
        # trap a signal ignored when it starts, and the Ctrl-C below would be lost.
        process = subprocess.Popen(["bash", "scripts/run.sh"], cwd=ROOT, env=env,
                                   stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   preexec_fn=_default_sigint)
    run = Run(process, output, var_dir)
    try:
        wait_for(lambda: serves(env), START_SECONDS, "console serving", run)
        yield run
    finally:
        # Whatever the test found, leave nothing running.
        for pid in processes_of(var_dir):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


def stop(run: Run, signum: signal.Signals) -> None:
    """Signal the script alone, as `kill PID` or Ctrl-C does; nothing of it may be left."""
    children = processes_of(run.var_dir) - {run.process.pid}
    assert len(children) >= 7, children  # destinations, worker, beat, mcp, two agents, web
    started_at = time.monotonic()
    run.process.send_signal(signum)
    run.process.wait(timeout=STOP_SECONDS)
    deadline = started_at + STOP_SECONDS
    while processes_of(run.var_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = processes_of(run.var_dir)
    assert not left, [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in left]
    assert time.monotonic() - started_at < STOP_SECONDS


def token_of(run: Run) -> str:
    found = TOKEN.search(run.printed())
    assert found, run.printed()
    return found.group(1)


def test_a_restart_reuses_the_token_and_the_queue_and_a_kill_stops_everything(
    tmp_path: Path,
) -> None:
    var_dir = tmp_path / "var"
    env = environment(var_dir)

    with started(env, var_dir, "first") as first:
        assert "Demo data created" in first.printed()
        wait_for(lambda: pending(var_dir) >= PENDING, START_SECONDS,
                 f"{PENDING} pending approvals", first)
        assert pending(var_dir) == PENDING
        token = token_of(first)
        stop(first, signal.SIGTERM)

    with started(env, var_dir, "second") as second:
        assert "Demo data found" in second.printed()
        assert token_of(second) == token
        assert (var_dir / "demo" / "agent-token").read_text().strip() == token
        # Both agents resumed their executions: they replay what they did, up to the call that
        # waits for an operator, and propose nothing new.
        wait_for(lambda: "call-2:" in second.log("agent")
                 and "call-7:" in second.log("research"), START_SECONDS,
                 "the agents' replay", second)
        time.sleep(5)  # two of their polls
        assert pending(var_dir) == PENDING
        stop(second, signal.SIGINT)
