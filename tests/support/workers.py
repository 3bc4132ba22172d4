"""Real Celery worker processes on a real Redis broker, for the worker tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.processes import ROOT, child_env

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
# `apply_async(connection=...)` publishes on the given broker connection (Celery's documented
# option, passed through to `send_task`); the type stubs do not list it, hence the ignores below.


def require_redis() -> str:
    """The Redis URL; skip with one line outside CI when no server answers, fail in CI."""
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true requires Redis at {REDIS_URL}: {exc}")
        pytest.skip(f"no Redis at {REDIS_URL}")
    return REDIS_URL


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the worker and every process it started: a crash, not a shutdown."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


@dataclass
class WorkerPool:
    broker: str
    queue: str
    directory: Path
    visibility_timeout: int
    workers: list[Worker] = field(default_factory=list)

    def start(self, concurrency: int = 1, **extra_env: str) -> Worker:
        """Start one more worker (with `concurrency` pool processes); `extra_env` is added to
        its environment (a failpoint)."""
        name = f"w{len(self.workers) + 1}-{self.queue}"
        log = self.directory / f"{name}.log"
        env = child_env(CELERY_BROKER_URL=self.broker, CELERY_QUEUE=self.queue,
                        BROKER_VISIBILITY_TIMEOUT=str(self.visibility_timeout), **extra_env)
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=prefork",
             f"--concurrency={concurrency}", "-Q", self.queue, "-n", f"{name}@%h",
             "--without-gossip", "--without-mingle", "--loglevel=INFO"],
            cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        worker = Worker(name, proc, log)
        self.workers.append(worker)
        wait_for(lambda: "ready." in worker.output(), 60, f"{name} to start")
        return worker

    def send(self, operation_id: str) -> None:
        """Publish one execution message for the operation, as the web process does."""
        from config.celery import app
        from dispatch.tasks import operation_execute_task

        with app.connection_for_write(self.broker) as conn:
            operation_execute_task.apply_async(  # type: ignore[call-arg]
                args=(operation_id,), connection=conn, queue=self.queue)

    def wake(self, *, approval_id: str | None = None, wait_id: str | None = None) -> None:
        """Publish one workflow wake-up (`dispatch.services.wakeups.wake_now`) to the pool."""
        from config.celery import app
        from dispatch.tasks import workflow_wake

        with app.connection_for_write(self.broker) as conn:
            workflow_wake.apply_async(  # type: ignore[call-arg]
                kwargs={"approval_id": approval_id, "wait_id": wait_id}, connection=conn,
                queue=self.queue)

    def send_task(self, name: str, *args: str) -> None:
        """Publish one message for the task registered as `name`, as a web process or the
        beat would."""
        from config.celery import app

        with app.connection_for_write(self.broker) as conn:
            app.tasks[name].apply_async(  # type: ignore[call-arg]
                args=args, connection=conn, queue=self.queue)

    def stop_all(self) -> None:
        """A warm shutdown of every worker (SIGTERM: running tasks finish), one after the other."""
        for worker in self.workers:
            if worker.proc.poll() is None:
                os.killpg(worker.proc.pid, signal.SIGTERM)
                try:
                    worker.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    worker.kill()

    def kill_all(self) -> None:
        """SIGKILL every worker still running, all at once: the end of a test, whose workers
        have nothing left to finish (a warm shutdown took 2-4 s a worker, some 80 times a CI
        run)."""
        running = [worker for worker in self.workers if worker.proc.poll() is None]
        for worker in running:
            os.killpg(worker.proc.pid, signal.SIGKILL)
        for worker in running:
            worker.proc.wait(timeout=10)


def wait_for(condition: Callable[[], object], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {seconds}s waiting for {what}")


@contextmanager
def worker_pool(directory: Path, *, visibility_timeout: int = 60) -> Iterator[WorkerPool]:
    broker = require_redis()
    pool = WorkerPool(broker, f"test-{uuid.uuid4().hex[:8]}", directory, visibility_timeout)
    try:
        yield pool
    finally:
        pool.kill_all()
