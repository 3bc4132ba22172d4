"""Bench 5: peak resident memory of a web worker (gunicorn) and a Celery worker after load.

Peak = `VmHWM` from /proc (the high-water mark of the resident set, shared pages included).
In a run of every benchmark, the servers measured are the ones the API and latency benchmarks
loaded; alone (`--only memory`), this benchmark starts its own and loads them the same way.
Target: each process under 150 MB.
"""

from __future__ import annotations

import subprocess
import uuid
from typing import Any

from bench import api_intake, approval_latency
from bench.common import (
    REDIS_URL,
    Context,
    Result,
    Table,
    Target,
    django_env,
    free_port,
    in_child,
    redis_available,
    stop_process,
)

NAME = "memory"
TITLE = "Peak RSS of a gunicorn worker and a Celery worker after load"
LIMIT_MB = 150.0


def plan(quick: bool) -> dict[str, Any]:
    return {"requests": 100, "dispatches": 10} if quick else {"requests": 1500,
                                                              "dispatches": 150}


def steps(quick: bool, backends: list[str]) -> int:
    return 4


def _own_web(ctx: Context, p: dict[str, Any]) -> dict[str, Any]:
    backend = "postgres" if "postgres" in ctx.dbs.backends() else "sqlite"
    url = ctx.dbs.url(backend, "memweb")
    env = django_env(url, ctx.dbs.var)
    proc = None
    try:
        agent = in_child(env, api_intake.make_agent, timeout=300)
        port = free_port()
        proc = api_intake.start_gunicorn(env, port, ctx.tmp / "gunicorn-memory.log")
        missing = api_intake.probe(port, agent["token"])
        if missing:
            raise RuntimeError(f"POST /api/v1/proposals/ is not there yet: {missing}")
        sent = 0
        for path, method, bodies, expect in (
                ("/api/v1/contracts/", "GET", None, 200),
                ("/api/v1/proposals/", "POST", api_intake.transfer_bodies(), 201)):
            sent += api_intake.load(port, agent["token"], path=path, method=method,
                                    bodies=bodies, expect=expect, requests=p["requests"],
                                    seconds=120)["sent"]
        return {"backend": backend, "rss": api_intake.worker_rss(proc),
                "load": f"{sent} requests"}
    finally:
        if proc is not None:
            stop_process(proc)
        ctx.dbs.drop(url)


def _own_celery(ctx: Context, p: dict[str, Any]) -> dict[str, Any]:
    backend = "postgres" if "postgres" in ctx.dbs.backends() else "sqlite"
    url = ctx.dbs.url(backend, "memcelery")
    tag = uuid.uuid4().hex[:8]
    procs: list[subprocess.Popen[Any]] = []
    try:
        destinations, dest_env = approval_latency.start_destinations(ctx.tmp / f"dest-{tag}")
        procs.append(destinations)
        env = django_env(url, ctx.dbs.var, CELERY_BROKER_URL=REDIS_URL,
                         CELERY_QUEUE=f"bench-mem-{tag}", **dest_env)
        worker = approval_latency.start_worker("config", f"bench-mem-{tag}", env,
                                               ctx.tmp / f"worker-mem-{tag}.log")
        procs.append(worker)
        data = in_child(env, approval_latency.drive, {"samples": p["dispatches"], "warmup": 0},
                        None, timeout=1200)
        return {"backend": backend, "rss": approval_latency.worker_rss(worker),
                "load": f"{len(data['approvals'])} approved dispatches"}
    finally:
        for proc in reversed(procs):
            stop_process(proc)
        ctx.dbs.drop(url)


def run(ctx: Context) -> Result:
    p = plan(ctx.quick)
    result = Result(NAME)
    table = Table("Resident memory after load (MB)",
                  ["process", "role", "peak (VmHWM)", "now (VmRSS)", "backend", "load"])
    web = ctx.shared.get("gunicorn")
    if web is None:
        ctx.progress.say("loading a gunicorn of its own")
        try:
            web = _own_web(ctx, p)
        except RuntimeError as exc:
            result.notes.append(f"web worker not measured: {exc}")
    ctx.progress.step(2)
    celery = ctx.shared.get("celery")
    if celery is None:
        missing = redis_available()
        if missing:
            result.notes.append(f"Celery worker not measured: {missing}")
        else:
            ctx.progress.say("loading a Celery worker of its own")
            celery = _own_celery(ctx, p)
    ctx.progress.step(2)
    for label, found, role_of in (("gunicorn worker", web, lambda r: f"pid {r[0]}"),
                                  ("celery worker", celery, lambda r: r[0])):
        if not found:
            continue
        peaks = []
        for record in found["rss"]:
            peak, now = record[1] / 1024, record[2] / 1024
            peaks.append(peak)
            table.rows.append([label, role_of(record), f"{peak:.0f}", f"{now:.0f}",
                               found["backend"], found["load"]])
        result.targets.append(Target(f"{label} peak RSS (largest process)", max(peaks),
                                     LIMIT_MB, at_least=False, unit="MB"))
    result.tables.append(table)
    result.figures = {"gunicorn": web, "celery": celery}
    return result
