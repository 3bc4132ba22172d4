"""Shared machinery of the benchmarks: databases, child processes, statistics, result tables.

Nothing here imports Django: the orchestrating process never configures it. Each measurement
runs in a child process whose environment names one database (`DATABASE_URL`), so a single
benchmark can measure SQLite and PostgreSQL side by side.
"""

from __future__ import annotations

import base64
import contextlib
import json
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
SETTINGS = "config.test_settings"

# Limits that would otherwise stop a load run part-way (they are policy, not the hot path).
#: What production runs with: DEBUG off (no debug cursor formatting and keeping every query),
#: which needs a secret key, and on PostgreSQL signing keys every process shares (a shared
#: deployment refuses to start without them). Every bench that measures our code runs with it.
DEBUG_OFF = {"DJANGO_DEBUG": "0",
             "SECRET_KEY": "bench-only-secret-key-not-for-production-use-0123456789",
             "SIGNING_KEYS": json.dumps([{
                 "kid": "bench", "private": base64.urlsafe_b64encode(os.urandom(32))
                 .rstrip(b"=").decode()}])}
LOAD_ENV = {
    "BUDGET_TOOL_CALLS_PER_PRINCIPAL": "1000000000",
    "BUDGET_TOOL_CALLS_PER_EXECUTION": "1000000",
    "API_RATE_PER_PRINCIPAL": "100000000/minute",
    "LOG_LEVEL": "ERROR",
    # The configuration docs/benchmarks.md measured: a psycopg pool per process (PostgreSQL).
    "DATABASE_POOL": "1",
}


# --- results ------------------------------------------------------------------------------------


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    note: str = ""


@dataclass
class Target:
    """One target: `value` compared with `limit` (`at_least` or at most), with its ratio."""

    name: str
    value: float
    limit: float
    at_least: bool
    unit: str = ""
    detail: str = ""
    met: bool | None = None  # None: decide from value and limit

    def __post_init__(self) -> None:
        if self.met is None:
            self.met = self.value >= self.limit if self.at_least else self.value <= self.limit

    @property
    def ratio(self) -> float:
        return self.value / self.limit if self.limit else float("inf")


@dataclass
class Result:
    name: str
    tables: list[Table] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)  # machine-readable, for the JSON file
    skipped: str = ""


class Progress:
    """What a benchmark reports while it runs; the runner draws it (or nothing)."""

    def __init__(self, advance: Callable[[float], None] | None = None,
                 describe: Callable[[str], None] | None = None) -> None:
        self._advance = advance or (lambda _n: None)
        self._describe = describe or (lambda _s: None)

    def step(self, n: float = 1) -> None:
        self._advance(n)

    def say(self, text: str) -> None:
        self._describe(text)


@dataclass
class Context:
    quick: bool
    tmp: Path
    dbs: Databases
    progress: Progress
    repeats: int
    # What one benchmark leaves for a later one in the same run (the servers' memory).
    shared: dict[str, Any] = field(default_factory=dict)


# --- statistics ---------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (p99 of 100 samples is the 99th smallest)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-pct * len(ordered) // 100))))
    return ordered[rank - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def fmt(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"


# --- databases ----------------------------------------------------------------------------------


def postgres_available() -> str:
    """'' if PostgreSQL answers, else why not."""
    try:
        import psycopg

        psycopg.connect(PG_ADMIN_URL, connect_timeout=3).close()
    except Exception as exc:
        return f"PostgreSQL not reachable at {PG_ADMIN_URL}: {exc}"
    return ""


def redis_available() -> str:
    try:
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        return f"Redis not reachable at {REDIS_URL}: {exc}"
    return ""


def pg_url(name: str) -> str:
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    return f"{base}/{name}"


def _pg_admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql)


def django_env(database_url: str, var_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a child process that runs the project against `database_url`."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "CELERY_BROKER_URL", "DISPATCH_CRASH_AT")}
    env.update({
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "DATABASE_URL": database_url,
        "APP_VAR_DIR": str(var_dir),
        "DJANGO_DEBUG": "1",
        **LOAD_ENV,
        **extra,
    })
    return env


class Databases:
    """Fresh databases for the benchmarks, migrated once per run into a template.

    SQLite: the migrated file is copied. PostgreSQL: `bench_<pid>` is created and migrated, and
    each benchmark gets `CREATE DATABASE bench_<pid>_<name> TEMPLATE bench_<pid>`. Every
    PostgreSQL database created here is dropped by `close()`.
    """

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.var = tmp / "var"
        (self.var / "staticfiles").mkdir(parents=True, exist_ok=True)
        self.prefix = f"bench_{os.getpid()}"
        self._sqlite_path = tmp / "template.sqlite3"
        self._sqlite_template: Path | None = None
        self._sqlite_proc: subprocess.Popen[str] | None = None
        self._pg_template: str | None = None
        self._pg_proc: subprocess.Popen[str] | None = None
        self._pg_created: list[str] = []
        self.pg_missing = postgres_available()

    def _start_migrate(self, url: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "manage.py", "migrate", "-v0", "--no-input"], cwd=ROOT,
            env=django_env(url, self.var), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)

    @staticmethod
    def _finish_migrate(proc: subprocess.Popen[str], url: str) -> None:
        try:
            output, _ = proc.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise RuntimeError(f"migrate did not finish on {url}") from None
        if proc.returncode != 0:
            raise RuntimeError(f"migrate failed on {url}:\n{output}")

    def prepare(self) -> None:
        """Migrate both templates at once, in the background; first use waits for them."""
        if self._sqlite_proc is None and self._sqlite_template is None:
            self._sqlite_proc = self._start_migrate(f"sqlite:///{self._sqlite_path}")
        if not self.pg_missing and self._pg_proc is None and self._pg_template is None:
            _pg_admin(f'DROP DATABASE IF EXISTS "{self.prefix}" WITH (FORCE)')
            _pg_admin(f'CREATE DATABASE "{self.prefix}"')
            self._pg_created.append(self.prefix)
            self._pg_proc = self._start_migrate(pg_url(self.prefix))

    def sqlite(self, name: str) -> str:
        if self._sqlite_template is None:
            self.prepare()
            assert self._sqlite_proc is not None
            self._finish_migrate(self._sqlite_proc, str(self._sqlite_path))
            self._sqlite_template = self._sqlite_path
        path = self.tmp / f"{name}-{uuid.uuid4().hex[:6]}.sqlite3"
        shutil.copyfile(self._sqlite_template, path)
        return f"sqlite:///{path}"

    def postgres(self, name: str) -> str:
        if self.pg_missing:
            raise RuntimeError(self.pg_missing)
        if self._pg_template is None:
            self.prepare()
            assert self._pg_proc is not None
            self._finish_migrate(self._pg_proc, self.prefix)
            self._pg_template = self.prefix
        db = f"{self.prefix}_{name}"
        _pg_admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        _pg_admin(f'CREATE DATABASE "{db}" TEMPLATE "{self._pg_template}"')
        self._pg_created.append(db)
        return pg_url(db)

    def url(self, backend: str, name: str) -> str:
        return self.sqlite(name) if backend == "sqlite" else self.postgres(name)

    def backends(self) -> list[str]:
        return ["sqlite"] + ([] if self.pg_missing else ["postgres"])

    def drop(self, url: str) -> None:
        if url.startswith("sqlite:///"):
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    Path(url.removeprefix("sqlite:///") + suffix).unlink()
            return
        name = url.rpartition("/")[2]
        with contextlib.suppress(Exception):
            _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self._pg_created:
            self._pg_created.remove(name)

    def close(self) -> None:
        for proc in (self._sqlite_proc, self._pg_proc):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for name in reversed(self._pg_created):
            with contextlib.suppress(Exception):
                _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._pg_created.clear()


@contextlib.contextmanager
def temp_root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="bench-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --- child processes ----------------------------------------------------------------------------


def setup_django(env: dict[str, str]) -> None:
    """Inside a spawned child: adopt `env` and start Django."""
    os.environ.update(env)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


class Report:
    """Handed to a child's target: `report(steps, text)` moves the parent's progress bar."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue

    def __call__(self, steps: float = 1, text: str = "") -> None:
        self._queue.put(("progress", steps, text))


def _child_main(queue: Any, env: dict[str, str], target: Callable[..., Any],
                args: tuple[Any, ...]) -> None:
    try:
        setup_django(env)
        queue.put(("ok", target(Report(queue), *args)))
    except BaseException:
        queue.put(("error", traceback.format_exc()))


def in_child(env: dict[str, str], target: Callable[..., Any], *args: Any,
             progress: Progress | None = None, timeout: float = 1800) -> Any:
    """Run `target(report, *args)` in a fresh spawned process with Django set up on `env`.

    `timeout` bounds the whole call; the child is killed when it passes.
    """
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child_main, args=(queue, env, target, args))
    proc.start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            try:
                status, *value = queue.get(timeout=min(left, 5))
            except Exception:
                if proc.exitcode is not None and queue.empty():
                    raise RuntimeError(f"{target.__name__} died with exit code "
                                       f"{proc.exitcode}") from None
                continue
            if status == "progress":
                if progress is not None:
                    progress.step(value[0])
                    if value[1]:
                        progress.say(value[1])
                continue
            break
    except TimeoutError:
        proc.kill()
        proc.join(5)
        raise RuntimeError(f"{target.__name__} gave no answer within {timeout:.0f}s") from None
    proc.join(30)
    if proc.is_alive():
        proc.kill()
    if status != "ok":
        raise RuntimeError(f"{target.__name__} failed in its child process:\n{value[0]}")
    return value[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], object], seconds: float, what: str,
             poll: float = 0.1) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(poll)
    raise RuntimeError(f"timed out after {seconds:.0f}s waiting for {what}")


def peak_rss_kib(pid: int) -> tuple[int, int]:
    """(VmHWM, VmRSS) of a process in KiB, from /proc: its peak and current resident size."""
    hwm = rss = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
            elif line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return hwm, rss


def children_of(pid: int) -> list[int]:
    """Direct children of a process (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return sorted(found)


def stop_process(proc: subprocess.Popen[Any], timeout: float = 15) -> None:
    """Stop a server this benchmark started (its own process group), politely then firmly."""
    import signal

    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
