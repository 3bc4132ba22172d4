"""The documented embedding example runs as written."""

from __future__ import annotations

import subprocess
import sys

from tests.support.processes import ROOT


def test_embedding_example_runs(tmp_path: object) -> None:
    proc = subprocess.run([sys.executable, "demo/embedding_example.py"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "APP_VAR_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "completed  {'city': 'Lisbon', 'forecast': 'sunny'}",
        "denied scope_violation ",
        "denied tool_not_permitted ",
        "finished done",
    ]
