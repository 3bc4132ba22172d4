"""The pure core imports no Django, DRF or Celery (docs/design.md#layout), checked in a fresh
interpreter."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import protocols

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("django", "rest_framework", "celery")

PROBE = """
import importlib, json, pkgutil, sys
import protocols
names = sorted(m.name for m in pkgutil.walk_packages(protocols.__path__, "protocols."))
for name in names:
    importlib.import_module(name)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {forbidden!r})
print(json.dumps({{"modules": names, "loaded": loaded}}))
"""


def _module_files() -> set[str]:
    package = ROOT / "protocols"
    found = set()
    for path in package.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.add(".".join(parts))
    return found - {"protocols"}


def _probe() -> dict[str, list[str]]:
    completed = subprocess.run(
        [sys.executable, "-c", PROBE.format(forbidden=set(FORBIDDEN))],
        cwd=ROOT, capture_output=True, text=True, check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def test_importing_every_protocols_module_loads_no_framework() -> None:
    result = _probe()
    assert result["modules"], "pkgutil found no modules under protocols/"
    assert result["loaded"] == []


def test_walk_covers_every_module_file() -> None:
    """A directory without `__init__.py` would be skipped by pkgutil and escape the check."""
    walked = {m.name for m in pkgutil.walk_packages(protocols.__path__, "protocols.")}
    assert walked == _module_files()
