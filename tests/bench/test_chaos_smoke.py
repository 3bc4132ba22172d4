"""The CI smoke run of the chaos soak (docs/reliability.md#chaos): `bench/chaos.py
--smoke` starts its private stack, runs a minute of load with one fault of each kind, drains,
audits, and exits 0 only when the audit found no violation."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.chaos_faults import KINDS
from bench.chaos_stack import PG_BIN

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _require_servers() -> None:
    missing = [what for what, found in (("initdb", (PG_BIN / "initdb").exists()),
                                        ("redis-server", shutil.which("redis-server")))
               if not found]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true requires {', '.join(missing)} for the chaos smoke run")
        pytest.skip(f"no {', '.join(missing)} on this machine")


# The soak makes its own PostgreSQL and Redis, so scripts/test.sh runs this once, in the
# SQLite pass (the PostgreSQL pass leaves tests/bench out).
def test_smoke_run_injects_every_fault_and_finds_no_violation(tmp_path: Path) -> None:
    _require_servers()
    figures = tmp_path / "chaos.json"
    done = subprocess.run([sys.executable, "bench/chaos.py", "--smoke", "--no-bar", "--json",
                           str(figures)], cwd=ROOT, capture_output=True, text=True,
                          timeout=420, check=False)
    report = f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr[-4000:]}"
    assert done.returncode == 0, report
    fig = json.loads(figures.read_text())
    assert fig["store"]["violations"] == [], report
    for kind in KINDS:
        assert fig["faults"][kind]["injected"] == 1, f"{kind} not injected\n{report}"
        assert fig["faults"][kind]["recovered"] == 1, f"no recovery after {kind}\n{report}"
    assert fig["revocations"] == 1, report
    # The load did happen: actions approved, and effects the destinations recorded.
    assert fig["store"]["approved"] > 10, report
    assert fig["store"]["effects"]["email"] > 0, report
    assert fig["store"]["effects"]["bank"] > 0, report
    assert "no violations" in fig["audit_check"], report
