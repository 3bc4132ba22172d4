"""Bench 2: proposal intake over the REST API under gunicorn (docs/rest-api.md#calls
`POST proposals/`).

`gunicorn config.wsgi -w 3` serves the project with DEBUG off; `bench.loadgen`, in another
process, sends bounded closed-loop load over loopback. The baseline, measured in the same run
with the same generator and alternating with it, is the lightest authenticated call,
`GET /api/v1/contracts/`. Proposals are `payments.transfer` (an approval is requested: one
write transaction with the proposal, the approval request and two audit events).
If the endpoint is not there yet, the benchmark says so and measures nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import (
    DEBUG_OFF,
    ROOT,
    Context,
    Result,
    Table,
    Target,
    children_of,
    django_env,
    fmt,
    free_port,
    in_child,
    median,
    ms,
    peak_rss_kib,
    percentile,
    stop_process,
    wait_for,
)

NAME = "api"
TITLE = "Proposal intake over the REST API (gunicorn -w 3)"
WORKERS = 3
THREADS = 6
# DEBUG off, served over plain HTTP on loopback: no redirect to HTTPS.
SERVER_ENV = {**DEBUG_OFF, "SECURE_SSL_REDIRECT": "0"}


def plan(quick: bool) -> dict[str, Any]:
    if quick:
        return {"requests": 60, "seconds": 20, "repeats": 1}
    return {"requests": 400, "seconds": 60, "repeats": 3}


def backends_for(ctx_quick: bool, available: list[str]) -> list[str]:
    preferred = [b for b in ("postgres", "sqlite") if b in available]
    return preferred[:1] if ctx_quick else preferred


def steps(quick: bool, backends: list[str]) -> int:
    return len(backends_for(quick, backends)) * (2 + 2 * plan(quick)["repeats"])


# --- pieces the memory benchmark reuses ---------------------------------------------------------


def make_agent(report: Any) -> dict[str, str]:
    from django.utils import timezone

    from bench.fixtures import make_world

    world = make_world(timezone.now())
    return {"token": world.owner_token, "operator": world.operator_name}


def start_gunicorn(env: dict[str, str], port: int, log: Path,
                   workers: int = WORKERS) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "config.wsgi", "-w", str(workers), "-b",
         f"127.0.0.1:{port}", "--timeout", "60", "--graceful-timeout", "5",
         "--log-level", "warning"],
        cwd=ROOT, env={**env, **SERVER_ENV}, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True)

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/contracts/", timeout=2)
        except urllib.error.HTTPError:
            return True  # 401: Django answers
        except OSError:
            return False
        return True

    try:
        wait_for(up, 60, "gunicorn to answer", poll=0.25)
        wait_for(lambda: len(children_of(proc.pid)) >= workers, 30, "gunicorn workers")
    except Exception:
        stop_process(proc)
        raise
    return proc


def transfer_bodies(count: int = 50) -> list[str]:
    return [json.dumps({"operation": "payments.transfer", "arguments": {
        "from_account": "acct-001", "to_account": f"acct-{900 + i % 99}",
        "amount": f"{10 + i}.{i % 100:02d}", "currency": "EUR", "memo": f"invoice {i}"}})
        for i in range(count)]


def probe(port: int, token: str) -> str:
    """'' if `POST /api/v1/proposals/` creates a proposal, else what it answered."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/proposals/", data=transfer_bodies(1)[0].encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except OSError as exc:
        return f"no answer: {exc}"
    if status == 201 and b'"digest"' in body:
        return ""
    return f"answered {status}: {body[:200]!r}"


def load(port: int, token: str, *, path: str, method: str, requests: int, seconds: float,
         bodies: list[str] | None = None, expect: int = 200,
         threads: int = THREADS) -> dict[str, Any]:
    spec = {"url": f"http://127.0.0.1:{port}{path}", "method": method,
            "headers": {"Authorization": f"Bearer {token}",
                        "Content-Type": "application/json"},
            "bodies": bodies or [], "requests": requests, "seconds": seconds,
            "threads": threads, "expect": expect}
    done = subprocess.run([sys.executable, "-m", "bench.loadgen", json.dumps(spec)], cwd=ROOT,
                          capture_output=True, text=True, timeout=seconds + 120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"loadgen failed: {done.stderr[-2000:]}")
    answer = json.loads(done.stdout)
    good = answer["statuses"].get(str(expect), 0)
    lat = answer["latencies"]
    return {"rps": good / answer["elapsed"], "sent": answer["sent"], "ok": good,
            "errors": answer["sent"] - good, "statuses": answer["statuses"],
            "p50": percentile(lat, 50), "p99": percentile(lat, 99),
            "elapsed": answer["elapsed"], "samples": answer["samples"]}


def worker_rss(proc: subprocess.Popen[bytes]) -> list[tuple[int, int, int]]:
    """(pid, peak KiB, current KiB) of each gunicorn worker."""
    found = []
    for pid in children_of(proc.pid):
        try:
            found.append((pid, *peak_rss_kib(pid)))
        except OSError:
            continue
    return found


# --- the benchmark ------------------------------------------------------------------------------


def run(ctx: Context) -> Result:
    p = plan(ctx.quick)
    result = Result(NAME)
    table = Table(f"Requests per second, {THREADS} client threads, {WORKERS} sync workers",
                  ["backend", "call", "req/s", "ratio to baseline", "p50 ms", "p99 ms",
                   "requests", "errors"])
    figures: dict[str, Any] = {}
    for backend in backends_for(ctx.quick, ctx.dbs.backends()):
        url = ctx.dbs.url(backend, "api")
        env = django_env(url, ctx.dbs.var)
        proc = None
        try:
            agent = in_child(env, make_agent, progress=ctx.progress, timeout=300)
            port = free_port()
            ctx.progress.say(f"{backend}: starting gunicorn")
            try:
                proc = start_gunicorn(env, port, ctx.tmp / f"gunicorn-{backend}.log")
            except RuntimeError as exc:
                result.skipped = f"gunicorn did not serve the project: {exc}"
                result.notes.append(result.skipped)
                continue
            ctx.progress.step(1)
            missing = probe(port, agent["token"])
            if missing:
                result.skipped = ("POST /api/v1/proposals/ is not there yet "
                                  f"(docs/rest-api.md#calls): {missing}; nothing measured")
                result.notes.append(result.skipped)
                continue
            runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "proposals": []}
            for rep in range(p["repeats"]):
                order = ("baseline", "proposals") if rep % 2 == 0 else ("proposals",
                                                                        "baseline")
                for call in order:
                    ctx.progress.say(f"{backend}: {call} rep {rep + 1}")
                    if call == "baseline":
                        runs[call].append(load(port, agent["token"], path="/api/v1/contracts/",
                                               method="GET", requests=p["requests"],
                                               seconds=p["seconds"]))
                    else:
                        runs[call].append(load(port, agent["token"], path="/api/v1/proposals/",
                                               method="POST", bodies=transfer_bodies(),
                                               requests=p["requests"], seconds=p["seconds"],
                                               expect=201))
                    ctx.progress.step(1)
            rss = worker_rss(proc)
            base = median([r["rps"] for r in runs["baseline"]])
            for call, label in (("baseline", "GET contracts/ (baseline)"),
                                ("proposals", "POST proposals/")):
                mine = runs[call]
                rps = median([r["rps"] for r in mine])
                table.rows.append([backend, label, fmt(rps), f"{rps / base:.0%}" if base else "-",
                                   ms(median([r["p50"] for r in mine])),
                                   ms(median([r["p99"] for r in mine])),
                                   sum(r["sent"] for r in mine),
                                   sum(r["errors"] for r in mine)])
            errors = sum(r["errors"] for r in runs["proposals"])
            result.targets.append(Target(f"{backend}: POST proposals/ errors", errors, 0,
                                         at_least=False,
                                         detail=f"of {sum(r['sent'] for r in runs['proposals'])}"))
            samples = [s for r in runs["proposals"] + runs["baseline"] for s in r["samples"]]
            if samples:
                result.notes.append(f"{backend} error samples: {samples[:3]}")
            figures[backend] = {"runs": runs, "worker_rss_kib": rss}
            ctx.shared.setdefault("gunicorn", {
                "backend": backend, "rss": rss,
                "load": f"{sum(r['sent'] for rs in runs.values() for r in rs)} requests"})
            result.notes.append(f"{backend}: gunicorn worker peak RSS after load: "
                                + ", ".join(f"{hwm / 1024:.0f} MB" for _, hwm, _ in rss))
        finally:
            if proc is not None:
                stop_process(proc)
            ctx.dbs.drop(url)
            ctx.progress.step(1)
    if ctx.dbs.pg_missing:
        result.notes.append(f"PostgreSQL skipped: {ctx.dbs.pg_missing}")
    if table.rows:
        result.tables.append(table)
        table.note = (f"{p['requests']} requests (or {p['seconds']} s) per round, "
                      f"{p['repeats']} alternating rounds per call; medians.")
    result.figures = figures
    return result
