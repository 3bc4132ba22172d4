"""The chaos soak's private stack (bench/chaos.py): a PostgreSQL instance and a Redis of its own,
the demo destinations, the web server (gunicorn), Celery workers and beat, every one a child
process on loopback, in a temporary directory, on free ports.

Nothing here imports Django. Each process is started in a session of its own, so that a fault
can kill a whole process tree (a worker and its pool) and `stop()` leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import children_of, free_port, stop_process, wait_for

ROOT = Path(__file__).resolve().parent.parent
PG_BIN = Path(os.environ.get("CHAOS_PG_BIN", "/usr/lib/postgresql/15/bin"))
BIN = Path(sys.executable).parent


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Child:
    """One supervised process: restarted by `Stack.supervise` when it has died."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    #: Not restarted by the supervisor while set (a fault restarts it itself).
    held: bool = False

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the process and its whole session: a crash."""
        if self.proc is None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)


@dataclass
class Stack:
    base: Path
    workers: int = 2
    concurrency: int = 1
    web_workers: int = 2
    pg_port: int = field(default_factory=free_port)
    redis_port: int = field(default_factory=free_port)
    web_port: int = field(default_factory=free_port)
    smtp_port: int = field(default_factory=free_port)
    bank_port: int = field(default_factory=free_port)
    lookup_port: int = field(default_factory=free_port)
    children: dict[str, Child] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    pg_root: Path | None = None

    @property
    def pg_data(self) -> Path:
        # Beside the base, not in it: the `postgres` user must reach it through every parent.
        if self.pg_root is None:
            self.pg_root = Path(tempfile.mkdtemp(prefix="chaos-pg-"))
            self.pg_root.chmod(0o755)
        return self.pg_root / "data"

    @property
    def dest_dir(self) -> Path:
        return self.base / "destinations"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def database_url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.pg_port}/console"

    # --- PostgreSQL (a private instance, run as the `postgres` OS user when we are root) ----

    def _as_postgres(self, argv: list[str]) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", "postgres", "--", *argv]
        return argv

    def pg_init(self) -> None:
        self.pg_data.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(self.pg_data, "postgres")
        subprocess.run(self._as_postgres([str(PG_BIN / "initdb"), "-D", str(self.pg_data),
                                          "-U", "postgres", "--auth=trust", "-E", "UTF8"]),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        conf = self.pg_data / "postgresql.conf"
        with conf.open("a") as out:
            out.write(f"\nport = {self.pg_port}\nlisten_addresses = '127.0.0.1'\n"
                      f"unix_socket_directories = '{self.pg_data}'\n"
                      # A commit is durable once acknowledged (synchronous_commit stays on: a
                      # crash would lose the last acknowledged commits otherwise). fsync and
                      # full-page writes guard against an OS crash, which the soak never does.
                      "fsync = off\nfull_page_writes = off\n"
                      "max_connections = 100\nshared_buffers = 64MB\n")
        self.pg_start()
        subprocess.run([str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(self.pg_port),
                        "-U", "postgres", "console"], check=True, stdout=subprocess.DEVNULL)

    def pg_start(self) -> None:
        subprocess.run(self._as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.pg_data), "-l",
                                          str(self.pg_data / "server.log"), "-w", "start"]),
                       check=True, stdout=subprocess.DEVNULL)

    def pg_crash(self) -> None:
        """Stop PostgreSQL as a crash does: `immediate` aborts every backend, no checkpoint."""
        subprocess.run(self._as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.pg_data),
                                          "-m", "immediate", "-w", "stop"]),
                       check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def pg_stop(self) -> None:
        subprocess.run(self._as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.pg_data),
                                          "-m", "fast", "-w", "stop"]),
                       check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    # --- the rest ------------------------------------------------------------------------------

    def base_env(self) -> dict[str, str]:
        keys = json.loads(subprocess.run(
            [sys.executable, "-c", "import json; from dispatch.signing import generate_entry; "
             "print(json.dumps([generate_entry()]))"],
            cwd=ROOT, env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)},
            check=True, capture_output=True, text=True).stdout)
        return {
            "PATH": os.environ["PATH"], "HOME": str(self.base), "LANG": "C.UTF-8",
            "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
            "DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_DEBUG": "0",
            "DISPATCH_EXTENSIONS": "demo.extension",
            "SECRET_KEY": uuid.uuid4().hex * 2, "SIGNING_KEYS": json.dumps(keys),
            "ALLOWED_HOSTS": "127.0.0.1,localhost", "SECURE_SSL_REDIRECT": "0",
            "SESSION_COOKIE_SECURE": "0", "CSRF_COOKIE_SECURE": "0",
            "APP_VAR_DIR": str(self.base / "var"), "DATABASE_URL": self.database_url,
            "DATABASE_CONN_MAX_AGE": "60",
            "CELERY_BROKER_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "BROKER_VISIBILITY_TIMEOUT": "30",
            "APPROVAL_RULES": (ROOT / "demo" / "approval_rules.json").read_text(),
            "SMTP_SINK_HOST": "127.0.0.1", "SMTP_SINK_PORT": str(self.smtp_port),
            "SMTP_SINK_LOOKUP_URL": f"http://127.0.0.1:{self.lookup_port}",
            "BANK_URL": f"http://127.0.0.1:{self.bank_port}",
            "DESTINATIONS_DIR": str(self.dest_dir),
            "BUDGET_TOOL_CALLS_PER_PRINCIPAL": "1000000000",
            "BUDGET_TOOL_CALLS_PER_EXECUTION": "1000000",
            "API_RATE_PER_PRINCIPAL": "100000000/minute",
            "LOG_LEVEL": "WARNING", "LOG_FORMAT": "console", "HANDLER_TIMEOUT_CAP": "8",
            "RECONCILE_LOOKUP_TIMEOUT": "5", "CONSOLE_PUBLIC_URL": self.web_url,
            "WEBHOOK_ALLOW_PRIVATE": "1",
        }

    def add(self, name: str, argv: list[str]) -> Child:
        child = Child(name, argv, self.env, self.base / "logs" / f"{name}.log")
        self.children[name] = child
        child.start()
        return child

    def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        (self.base / "logs").mkdir(exist_ok=True)
        (self.base / "var").mkdir(exist_ok=True)
        self.pg_init()
        self.redis_start()
        self.env = self.base_env()
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT,
                       env=self.env, check=True, stdout=subprocess.DEVNULL)
        self.add("destinations", [sys.executable, "-m", "demo.destinations", "--dir",
                                  str(self.dest_dir), "--smtp-port", str(self.smtp_port),
                                  "--bank-port", str(self.bank_port), "--lookup-port",
                                  str(self.lookup_port), "--hang-seconds", "4"])
        self.add("web", [str(BIN / "gunicorn"), "config.wsgi", "--bind",
                         f"127.0.0.1:{self.web_port}", "--workers", str(self.web_workers),
                         "--timeout", "30", "--graceful-timeout", "5"])
        for n in range(1, self.workers + 1):
            self.add(f"worker{n}", [str(BIN / "celery"), "-A", "config", "worker",
                                    "--pool=prefork", f"--concurrency={self.concurrency}",
                                    "-n", f"chaos{n}@%h", "--without-gossip",
                                    "--without-mingle", "--loglevel=WARNING"])
        self.add("beat", [str(BIN / "celery"), "-A", "config", "-q", "beat",
                          "--loglevel=INFO",
                          f"--schedule={self.base / 'var' / 'celerybeat-schedule'}"])
        wait_for(lambda: listening(self.web_port) and listening(self.bank_port)
                   and listening(self.smtp_port), 90, "the web server and the destinations")
        wait_for(lambda: all(self.pool_pids(n) for n in range(1, self.workers + 1)), 120,
                   "the workers' pools")

    def redis_start(self) -> None:
        log = self.base / "logs" / "redis.log"
        with log.open("ab") as out:
            self.redis = subprocess.Popen(
                ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(lambda: listening(self.redis_port), 30, "redis")

    def redis_crash(self) -> None:
        with suppress(ProcessLookupError):
            os.killpg(self.redis.pid, signal.SIGKILL)
        self.redis.wait(timeout=10)

    def pool_pids(self, n: int) -> list[int]:
        child = self.children[f"worker{n}"]
        return children_of(child.proc.pid) if child.alive() and child.proc else []

    def web_worker_pids(self) -> list[int]:
        child = self.children["web"]
        return children_of(child.proc.pid) if child.alive() and child.proc else []

    def supervise(self) -> list[str]:
        """Restart every child that has died (as systemd or Compose's `restart` would)."""
        restarted = []
        for child in self.children.values():
            if not child.held and not child.alive():
                child.restarts += 1
                child.start()
                restarted.append(child.name)
        return restarted

    def stop(self, *, keep: bool = False) -> None:
        for child in reversed(list(self.children.values())):
            child.held = True
            child.stop()
        if getattr(self, "redis", None) is not None:
            stop_process(self.redis)
        if self.pg_root is not None and self.pg_data.exists():
            self.pg_stop()
            if not keep:
                shutil.rmtree(self.pg_root, ignore_errors=True)
