"""Bench 3: approval -> handler start, through Celery on Redis with a real worker process.

An operator grants `email.send` proposals made with `dispatch_on_approval: true`; the grant
commits the decision and the permit and enqueues the worker's claim after commit
(docs/design.md#write-transactions). Handler start is the attempt's `started_at`, written by the
worker in its claim's transaction, just before the handler's I/O; the latency is
that minus the decision time passed to `approval_decide`. The baseline, sampled alternately on
the same broker, is the round trip of an empty task of a throwaway Celery app
(`bench.raw_celery`): `apply_async` then `get` of its result. One sample at a time, so nothing
queues. Targets: p99 within 2x the raw round trip's p99, and under 50 ms.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import (
    DEBUG_OFF,
    REDIS_URL,
    ROOT,
    Context,
    Result,
    Table,
    Target,
    children_of,
    django_env,
    free_port,
    in_child,
    median,
    ms,
    peak_rss_kib,
    percentile,
    redis_available,
    stop_process,
    wait_for,
)

NAME = "latency"
TITLE = "Approval -> handler start through Celery/Redis, vs a raw Celery round trip"
P99_LIMIT = 0.050
RAW_FACTOR = 2.0


def plan(quick: bool) -> dict[str, Any]:
    return {"samples": 20, "warmup": 3} if quick else {"samples": 300, "warmup": 10}


def steps(quick: bool, backends: list[str]) -> int:
    return 4 + 10


# --- processes ----------------------------------------------------------------------------------


def start_destinations(directory: Path) -> tuple[subprocess.Popen[str], dict[str, str]]:
    smtp, bank = free_port(), free_port()
    directory.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "demo.destinations", "--dir", str(directory),
         "--smtp-port", str(smtp), "--bank-port", str(bank), "--hang-seconds", "5"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, start_new_session=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    line = proc.stdout.readline()
    while "destinations ready" not in line:
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc)
            raise RuntimeError(f"destinations did not start: {line}")
        line = proc.stdout.readline()
    return proc, {"DESTINATIONS_DIR": str(directory), "SMTP_SINK_PORT": str(smtp),
                  "BANK_URL": f"http://127.0.0.1:{bank}"}


def start_worker(app: str, queue: str, env: dict[str, str],
                 log: Path) -> subprocess.Popen[bytes]:
    """One prefork worker of concurrency 1, as tests/support/workers.py starts them."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", app, "worker", "--pool=prefork",
         "--concurrency=1", "-Q", queue, "-n", f"{queue}@%h", "--without-gossip",
         "--without-mingle", "--without-heartbeat", "--loglevel=INFO"],
        cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        wait_for(lambda: "ready." in log.read_text(errors="replace")
                 or proc.poll() is not None, 90, f"the {app} worker to start", poll=0.25)
    except RuntimeError:
        stop_process(proc)
        raise
    if proc.poll() is not None:
        raise RuntimeError(f"the {app} worker exited: {log.read_text(errors='replace')[-2000:]}")
    return proc


def worker_rss(proc: subprocess.Popen[bytes]) -> list[tuple[str, int, int]]:
    """(role, peak KiB, current KiB) of a Celery worker's main process and pool children."""
    found = [("main", *peak_rss_kib(proc.pid))]
    # `python -m celery` is the session leader; the pool children hang below it.
    for pid in children_of(proc.pid):
        try:
            found.append(("pool", *peak_rss_kib(pid)))
        except OSError:
            continue
    return found


# --- the driver (a child with Django set up) ----------------------------------------------------


def drive(report: Any, plan_: dict[str, Any], raw_queue: str | None) -> dict[str, Any]:
    from django.db.models import Count
    from django.utils import timezone

    from bench import raw_celery
    from bench.fixtures import DRAFT, make_world
    from dispatch.models import Attempt, Operation, Principal
    from dispatch.services.approvals import approval_decide
    from dispatch.services.proposals import proposal_create
    from dispatch.services.resources import resource_create

    now = timezone.now()
    world = make_world(now)
    owner = Principal.objects.get(id=world.owner_id)
    operator = Principal.objects.get(id=world.operator_id)
    total = plan_["samples"] + plan_["warmup"]
    proposals = []
    for i in range(total):
        resource, _ = resource_create(principal=owner, kind="email_draft",
                                      payload={**DRAFT, "subject": f"Refund {i}"}, now=now)
        proposals.append(proposal_create(
            principal=owner, operation="email.send",
            arguments={"draft": {"id": resource.id, "revision": 1}},
            dispatch_on_approval=True, now=now))
    report(1, f"{total} proposals made")

    def raw_sample() -> tuple[float, float]:
        if raw_queue is None:
            return float("nan"), float("nan")
        wall, t0 = time.time(), time.perf_counter()
        started = raw_celery.empty.apply_async(queue=raw_queue).get(timeout=30)
        return time.perf_counter() - t0, started - wall

    def approval_sample(proposal: Any) -> dict[str, float]:
        decided = timezone.now()
        t0 = time.perf_counter()
        _, permit = approval_decide(approver=operator, approval_id=proposal.approval.id,
                                    decision="grant", digest=proposal.digest, now=decided)
        in_request = time.perf_counter() - t0
        assert permit is not None
        deadline = time.monotonic() + 30
        started = None
        while time.monotonic() < deadline:
            started = Attempt.objects.filter(operation_id=permit.operation_id,
                                             number=1).values_list("started_at",
                                                                   flat=True).first()
            if started is not None:
                break
            time.sleep(0.003)
        if started is None:
            raise RuntimeError(f"operation {permit.operation_id} never started")
        # Let the handler finish, so that the next sample finds the worker idle.
        while time.monotonic() < deadline and Operation.objects.filter(
                id=permit.operation_id, state="claimed").exists():
            time.sleep(0.005)
        return {"latency": (started - decided).total_seconds(), "in_request": in_request}

    raw_rt: list[float] = []
    raw_oneway: list[float] = []
    approvals: list[dict[str, float]] = []
    step = max(1, plan_["samples"] // 10)
    for i, proposal in enumerate(proposals):
        rt, oneway = raw_sample()
        sample = approval_sample(proposal)
        if i < plan_["warmup"]:
            continue
        raw_rt.append(rt)
        raw_oneway.append(oneway)
        approvals.append(sample)
        if (i - plan_["warmup"] + 1) % step == 0:
            report(1, f"{i - plan_['warmup'] + 1}/{plan_['samples']} samples")
    states = dict(Operation.objects.values("state").annotate(n=Count("id")).values_list(
        "state", "n"))
    return {"raw_rt": raw_rt, "raw_oneway": raw_oneway, "approvals": approvals,
            "operation_states": states}


def run(ctx: Context) -> Result:
    p = plan(ctx.quick)
    result = Result(NAME)
    missing = redis_available()
    if missing:
        result.skipped = missing
        return result
    backend = "postgres" if "postgres" in ctx.dbs.backends() else "sqlite"
    url = ctx.dbs.url(backend, "latency")
    tag = uuid.uuid4().hex[:8]
    queue, raw_queue = f"bench-{tag}", f"bench-raw-{tag}"
    procs: list[subprocess.Popen[Any]] = []
    try:
        ctx.progress.say("starting destinations and workers")
        destinations, dest_env = start_destinations(ctx.tmp / f"destinations-{tag}")
        procs.append(destinations)
        # DEBUG off on the worker and the deciding process alike, as deployed.
        env = django_env(url, ctx.dbs.var, CELERY_BROKER_URL=REDIS_URL, CELERY_QUEUE=queue,
                         **DEBUG_OFF, **dest_env)
        worker = start_worker("config", queue, env, ctx.tmp / f"worker-{tag}.log")
        procs.append(worker)
        ctx.progress.step(1)
        raw_env = {**env, "BENCH_BROKER": REDIS_URL, "BENCH_RAW_QUEUE": raw_queue}
        raw_worker = start_worker("bench.raw_celery", raw_queue, raw_env,
                                  ctx.tmp / f"raw-worker-{tag}.log")
        procs.append(raw_worker)
        ctx.progress.step(1)
        data = in_child({**raw_env}, drive, p, raw_queue, progress=ctx.progress,
                        timeout=1800)
        rss = worker_rss(worker)
    finally:
        for proc in reversed(procs):
            stop_process(proc)
        ctx.dbs.drop(url)
        ctx.progress.step(1)

    lat = [s["latency"] for s in data["approvals"]]
    req = [s["in_request"] for s in data["approvals"]]
    rt, oneway = data["raw_rt"], data["raw_oneway"]
    table = Table(f"Latency, {len(lat)} sequential samples each ({backend}, Redis)",
                  ["stage", "p50 ms", "p90 ms", "p99 ms", "max ms"])

    def row(label: str, values: list[float]) -> None:
        table.rows.append([label, ms(percentile(values, 50)), ms(percentile(values, 90)),
                           ms(percentile(values, 99)), ms(max(values))])

    row("approval -> handler start", lat)
    row("  of which in the decide request", req)
    row("raw Celery round trip (baseline)", rt)
    row("raw Celery enqueue -> task start", oneway)
    table.note = ("handler start = Attempt.started_at - decision time; the request does the "
                  "decision and the enqueue, the worker the claim with attempt 1. Operation "
                  "states afterwards: "
                  f"{data['operation_states']}")
    result.tables.append(table)
    p99, raw_p99 = percentile(lat, 99), percentile(rt, 99)
    result.targets.append(Target("p99 approval -> handler start vs raw round trip p99",
                                 p99 / raw_p99, RAW_FACTOR, at_least=False, unit="x raw",
                                 detail=f"{ms(p99)} ms vs {ms(raw_p99)} ms"))
    result.targets.append(Target("p99 approval -> handler start", p99 * 1000,
                                 P99_LIMIT * 1000, at_least=False, unit="ms"))
    ctx.shared["celery"] = {"backend": backend, "rss": rss,
                            "load": f"{len(lat) + p['warmup']} approved dispatches"}
    result.notes.append("Celery worker peak RSS: " + ", ".join(
        f"{role} {hwm / 1024:.0f} MB" for role, hwm, _ in rss))
    result.figures = {"backend": backend, **data, "worker_rss_kib": rss,
                      "median_latency": median(lat)}
    return result
