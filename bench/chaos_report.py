"""The chaos soak's figures (bench/chaos.py): a progress line while it runs, the report at the
end."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any

from bench.chaos_faults import KINDS, Injected
from bench.common import percentile


class Bar:
    """One line on stderr, redrawn at most once a second: the load's time and the faults."""

    def __init__(self, seconds: float, faults: int, enabled: bool) -> None:
        self.seconds, self.faults, self.enabled = seconds, faults, enabled
        self.started = time.monotonic()
        self.drawn = 0.0

    def draw(self, injected: int, actions: int, note: str = "", force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self.drawn < 1 and not force):
            return
        self.drawn = now
        elapsed = now - self.started
        done = min(1.0, max(elapsed / self.seconds, injected / max(self.faults, 1)) if
                   elapsed < self.seconds else injected / max(self.faults, 1))
        filled = int(done * 30)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {elapsed:6.0f}s "
                         f"faults {injected}/{self.faults} actions {actions} {note:<28}")
        sys.stderr.flush()

    def end(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def figures(*, seed: int, seconds: float, counts: Counter[str], injected: list[Injected],
            audit: dict[str, Any], settled_by_person: Counter[str], audit_check: str,
            revocations: list[dict[str, Any]], restarts: dict[str, int],
            drained_in: float) -> dict[str, Any]:
    by_kind: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        mine = [i for i in injected if i.fault.kind == kind]
        times = [i.recovered_in for i in mine if i.recovered_in is not None]
        by_kind[kind] = {
            "injected": len(mine), "recovered": len(times),
            "recovery_p50_s": round(percentile(times, 50), 2) if times else None,
            "recovery_p95_s": round(percentile(times, 95), 2) if times else None,
            "recovery_max_s": round(max(times), 2) if times else None,
        }
    return {"seed": seed, "load_seconds": round(seconds), "load": dict(sorted(counts.items())),
            "faults": by_kind, "faults_total": len(injected),
            "each_fault": [{"at_s": i.fault.at, "kind": i.fault.kind, "detail": i.detail,
                            "recovered_in_s": None if i.recovered_in is None
                            else round(i.recovered_in, 2)} for i in injected],
            "unrecovered": [f"{i.fault.kind} at {i.fault.at}s ({i.detail})" for i in injected
                            if i.recovered_in is None],
            "revocations": len(revocations), "process_restarts": restarts,
            "drained_in_s": round(drained_in, 1), "store": audit,
            "settled_by_person": dict(settled_by_person), "audit_check": audit_check}


def render(fig: dict[str, Any]) -> str:
    store = fig["store"]
    lines = [f"chaos soak: seed {fig['seed']}, {fig['load_seconds']} s of load, "
             f"{fig['faults_total']} faults, {fig['revocations']} revocations",
             "", "load (through the REST API):"]
    lines += [f"  {what:<40} {n}" for what, n in fig["load"].items()]
    lines += ["", f"{'fault':<15}{'injected':>9}{'recovered':>10}{'p50 s':>8}{'p95 s':>8}"
                  f"{'max s':>8}"]
    for kind, row in fig["faults"].items():
        def cell(value: Any) -> str:
            return f"{value:>8.2f}" if isinstance(value, float) else f"{'-':>8}"
        lines.append(f"{kind:<15}{row['injected']:>9}{row['recovered']:>10}"
                     f"{cell(row['recovery_p50_s'])}{cell(row['recovery_p95_s'])}"
                     f"{cell(row['recovery_max_s'])}")
    lines += ["(recovery: from the fault to the first fresh action through web, PostgreSQL, "
              "Redis and a worker completing)",
              f"process restarts by the supervisor: {fig['process_restarts']}",
              f"drained in {fig['drained_in_s']} s",
              "", f"operations by state: {store['operations']}",
              f"operations by contract: {store['operations_by_contract']}",
              f"approvals granted: {store['approved']}",
              f"effects at the destinations: {store['effects']}",
              f"uncertain outcomes, final state: {store['uncertain_outcomes']}",
              f"unknowns settled by a person after the drain (from the destination's "
              f"records): {fig['settled_by_person'] or 'none'}",
              f"audit_check: {fig['audit_check']}"]
    violations = store["violations"]
    if fig["unrecovered"]:
        lines.append(f"faults never recovered from: {fig['unrecovered']}")
    lines += ["", f"violations: {len(violations)}"] + [f"  {v}" for v in violations]
    return "\n".join(lines)
