"""The CI smoke run of the benchmarks: `python bench/run_all.py --quick` finishes and prints
every benchmark's table (the figures themselves are not judged here; see docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# The title of the first table each benchmark prints.
TABLES = {
    "claims": "[claims] Claims per second",
    "actions": "[actions] Actions per second",
    "api": "[api] Requests per second",
    "latency": "[latency] Latency,",
    "growth": "[growth] Median latency at each size",
    "memory": "[memory] Resident memory after load",
}


# The benchmarks make their own SQLite and PostgreSQL databases, so scripts/test.sh runs this
# once, in the SQLite pass (the PostgreSQL pass leaves tests/bench out).
def test_quick_run_prints_every_table() -> None:
    done = subprocess.run([sys.executable, "bench/run_all.py", "--quick"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900, check=False)
    report = f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr[-4000:]}"
    assert done.returncode == 0, report
    assert "crashed:" not in done.stdout, report
    for name, title in TABLES.items():
        assert title in done.stdout, f"{name} printed no table\n{report}"
    assert "targets:" in done.stdout, report
    # Errors are a performance target in the summary (they do not change the exit status), but
    # an action that fails in the smoke run is a bug: every side of `actions` must have none.
    lines = [line for line in done.stdout.splitlines()
             if line.strip().startswith("actions") and "errors, every side" in line]
    assert lines, report
    assert all(line.rstrip().endswith("met") for line in lines), report
    # The raw side of each action (bench.noop, email.send) runs exactly our write statements: a
    # change to the product's write set must change the bench's raw side with it.
    mirrors = [line for line in done.stdout.splitlines()
               if line.strip().startswith("actions") and "raw mirrors ours" in line]
    assert len(mirrors) >= 4, report  # two actions, two stores
    assert all(line.rstrip().endswith("met") for line in mirrors), report
