"""A chaos soak: the whole system under steady load while its parts fail at random
moments, then an audit from outside and from the store.

    .venv/bin/python bench/chaos.py [--seed N] [--seconds S] [--faults F] [--smoke] [--json P]

It starts a private stack on loopback (bench/chaos_stack.py): a PostgreSQL instance and a Redis
of its own, the demo destinations, gunicorn, two Celery workers and beat. Agents propose emails,
payments and publications through the REST API, two operators approve them (four eyes for a
large payment), some are cancelled, some agents' grants are revoked (bench/chaos_load.py).
Meanwhile faults drawn from the seed are injected (bench/chaos_faults.py), and after each a
probe times the recovery. The load stops after `--seconds` once `--faults` faults are in (or at
`--max-actions`, or at twice `--seconds`); the stack drains, unknown outcomes that reconciliation
cannot settle are settled by an admin from the destination's own records, and the audit runs
(bench/chaos_audit.py, `manage.py audit_check`). Exit status 1 on any violation.

`--smoke` is the CI run: a short load and one fault of each kind.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.chaos_faults import Fault, Injected, inject, schedule
from bench.chaos_load import Agent, Approver, Canceller, Shared, patiently, probe
from bench.chaos_report import Bar, figures, render
from bench.chaos_stack import ROOT, Stack


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/chaos.py", description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--seconds", type=float, default=1800.0, help="load duration (1800)")
    parser.add_argument("--faults", type=int, default=300, help="faults to inject (300)")
    parser.add_argument("--max-actions", type=int, default=1_000_000)
    parser.add_argument("--agents", type=int, default=3, help="agents proposing at once")
    parser.add_argument("--revocations", type=int, default=None,
                        help="agents whose grants are revoked (default faults // 30)")
    parser.add_argument("--drain", type=float, default=240.0,
                        help="seconds allowed for the drain (240)")
    parser.add_argument("--smoke", action="store_true",
                        help="CI: 60 s of load, one fault of each kind, one revocation")
    parser.add_argument("--json", type=Path, help="write the figures there too")
    parser.add_argument("--keep", action="store_true", help="keep the stack's directory")
    parser.add_argument("--no-bar", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.smoke:
        args.seconds, args.faults, args.drain = 60.0, 7, 150.0
        args.revocations = 1 if args.revocations is None else args.revocations
    if args.revocations is None:
        args.revocations = max(1, args.faults // 30)
    return args


#: Approved permits of `dispatch_on_approval` proposals that no worker has claimed yet.
UNCLAIMED = ("SELECT count(*) FROM dispatch_permit p JOIN dispatch_proposal r "
             "ON r.id = p.proposal_id WHERE p.state = 'issued' AND r.dispatch_on_approval")


def sql(stack: Stack, query: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(stack.database_url.replace("postgres://", "postgresql://"),
                         connect_timeout=5) as conn:
        return list(conn.execute(query).fetchall())


def child(stack: Stack, module: str, *args: str, stdin: str = "") -> str:
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=stack.env,
                          input=stdin, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{module} {args}: {done.stderr[-3000:]}")
    return done.stdout


class Soak:
    def __init__(self, args: argparse.Namespace, stack: Stack) -> None:
        self.args, self.stack = args, stack
        self.shared = Shared(random.Random(args.seed))
        self.injected: list[Injected] = []
        self.probes: list[threading.Thread] = []
        self.threads: list[threading.Thread] = []
        self.agents: dict[str, Agent] = {}
        self.revocations: list[dict[str, Any]] = []

    def start_load(self, world: dict[str, Any]) -> None:
        url = self.stack.web_url
        Agent.sources_url = f"http://127.0.0.1:{self.stack.bank_port}/sources"
        self.world = world
        self.spare = list(world["agents"])
        for _ in range(self.args.agents):
            self.add_agent()
        tokens = {a["name"]: a["token"] for a in world["agents"]}
        for runner in (Approver(self.shared, url, world["operators"]),
                       Canceller(self.shared, url, tokens)):
            self.spawn(runner.run)

    def spawn(self, target: Any) -> None:
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        self.threads.append(thread)

    def add_agent(self) -> None:
        if not self.spare:
            return
        made = self.spare.pop(0)
        agent = Agent(self.shared, self.stack.web_url, made["name"], made["token"])
        self.agents[made["name"]] = agent
        self.spawn(agent.run)

    def revoke_one(self) -> None:
        live = [name for name, agent in self.agents.items() if not agent.retired.is_set()]
        if not live:
            return
        name = self.shared.choice(sorted(live))
        self.agents[name].retired.set()
        try:
            self.revocations.append(json.loads(child(self.stack, "bench.chaos_world",
                                                     "revoke", name)))
            self.shared.count("agents revoked")
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            self.shared.count("revocation failed (store down)")
            print(f"\nrevocation of {name} failed: {error}", file=sys.stderr)
        self.add_agent()

    def fault(self, fault: Fault) -> None:
        started = time.monotonic()
        detail = inject(self.stack, fault, self.shared)
        record = Injected(fault, started, detail)
        self.injected.append(record)
        self.shared.count(f"fault {fault.kind}")

        thread = threading.Thread(target=self.timed_probe(record), daemon=True)
        thread.start()
        self.probes.append(thread)

    def timed_probe(self, record: Injected) -> Any:
        def measure() -> None:
            took = probe(self.stack.web_url, self.world["prober"]["token"])
            if took is not None:
                # The probe starts when the injection has returned (after a restart's downtime).
                record.recovered_in = time.monotonic() - record.started
        return measure

    def run(self) -> float:
        args = self.args
        plan = schedule(args.seed, args.seconds * 0.9, args.faults,
                        every_kind_first=args.smoke)
        rng = random.Random(args.seed + 1)
        revoke_at = sorted(rng.uniform(0.1, 0.9) * args.seconds
                           for _ in range(args.revocations))
        bar = Bar(args.seconds, args.faults, not args.no_bar)
        started = time.monotonic()
        pending = list(plan)
        while True:
            elapsed = time.monotonic() - started
            actions = sum(n for k, n in self.shared.counts.items() if k.startswith("proposed"))
            if elapsed >= args.seconds and not pending:
                break
            if elapsed >= args.seconds * 2 or actions >= args.max_actions:
                break
            for name in self.stack.supervise():
                self.shared.count(f"restarted {name}")
            if pending and elapsed >= pending[0].at:
                self.fault(pending.pop(0))
            if revoke_at and elapsed >= revoke_at[0]:
                revoke_at.pop(0)
                self.revoke_one()
            bar.draw(len(self.injected), actions)
            time.sleep(0.2)
        bar.end()
        return time.monotonic() - started

    def drain(self) -> float:
        """Stop the load; wait until nothing is claimed or pending, no approved
        `dispatch_on_approval` permit waits for its claim, and the unknowns settle. A run
        message lost late in the load (a Redis restart) is handed over again by reconciliation
        only RECONCILE_UNCLAIMED_GRACE_SECONDS (30) after its grant: a drain that ended before
        reported a lost intent the runtime was about to recover."""
        self.shared.stop.set()
        started = time.monotonic()
        for thread in self.threads + self.probes:
            thread.join(timeout=max(1.0, self.args.drain - (time.monotonic() - started)))
        stable, last = 0, None
        while time.monotonic() - started < self.args.drain:
            self.stack.supervise()
            try:
                rows = dict(sql(self.stack, "SELECT state, count(*) FROM dispatch_operation "
                                            "GROUP BY state"))
                ((unclaimed,),) = sql(self.stack, UNCLAIMED)
            except Exception:
                time.sleep(1)
                continue
            busy = rows.get("claimed", 0) + rows.get("pending", 0) + unclaimed
            stable = stable + 1 if rows == last else 0
            last = rows
            if busy == 0 and stable >= 10:
                break
            time.sleep(1)
        return time.monotonic() - started

    def settle_unknowns(self) -> Counter[str]:
        """What a person does with what reconciliation could not settle: read the destination's
        own record of the key, and resolve the operation as an admin through the API."""
        from demo.destinations import list_all
        from exact_console import Client
        from exact_console.errors import Denied

        records = list_all(self.stack.dest_dir)
        keys = {str(r["message_id"]).strip("<>").split("@", 1)[0] for r in records["email"]}
        keys |= {str(r["key"]) for r in records["bank"] + records["publications"]}
        settled: Counter[str] = Counter()
        with Client(self.stack.web_url, self.world["admin"]["token"], timeout=20) as admin:
            for (op_id,) in sql(self.stack, "SELECT id FROM dispatch_operation "
                                            "WHERE state = 'unknown'"):
                present = op_id in keys
                held = "hold" if present else "lack"
                try:
                    patiently(partial(admin.resolve, op_id,
                                      outcome="completed" if present else "no_effect",
                                      evidence=f"the destination's own records {held} key "
                                               f"{op_id}"))
                except Denied as refused:  # reconciliation settled it meanwhile
                    settled[f"refused {refused.code}"] += 1
                    continue
                settled["completed" if present else "no_effect"] += 1
        return settled


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    base = Path(tempfile.mkdtemp(prefix="chaos-"))
    stack = Stack(base)
    print(f"chaos soak: seed {args.seed}, {args.seconds:.0f} s, {args.faults} faults; "
          f"stack in {base}", file=sys.stderr)
    try:
        stack.start()
        world = json.loads(child(stack, "bench.chaos_world", "setup",
                                 str(args.agents + args.revocations)))
        soak = Soak(args, stack)
        soak.start_load(world)
        seconds = soak.run()
        drained = soak.drain()
        settled = soak.settle_unknowns()
        audit = json.loads(child(stack, "bench.chaos_audit", stdin=json.dumps({
            "destinations_dir": str(stack.dest_dir),
            "proposals": sorted(soak.shared.proposed)})))
        check = subprocess.run([sys.executable, "manage.py", "audit_check"], cwd=ROOT,
                               env=stack.env, capture_output=True, text=True, timeout=600)
        checked = (check.stdout.strip().splitlines() or [check.stderr.strip()])[0]
        if check.returncode != 0:
            audit["violations"].append(f"audit_check exit {check.returncode}: "
                                       f"{(check.stdout + check.stderr)[-2000:]}")
        fig = figures(seed=args.seed, seconds=seconds, counts=soak.shared.counts,
                      injected=soak.injected, audit=audit, settled_by_person=settled,
                      audit_check=checked, revocations=soak.revocations,
                      restarts={n: c.restarts for n, c in stack.children.items()},
                      drained_in=drained)
        print(render(fig))
        if args.json:
            args.json.write_text(json.dumps(fig, indent=2))
        return 1 if audit["violations"] else 0
    finally:
        stack.stop(keep=args.keep)
        if args.keep:
            print(f"kept {base} and PostgreSQL's data in {stack.pg_root}", file=sys.stderr)
        if not args.keep:
            import shutil

            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
