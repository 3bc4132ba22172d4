"""Failpoints and the payload-rewrite switch exist only under the test settings
(docs/design.md#how-it-is-tested): under the production settings `DISPATCH_CRASH_AT`,
`DISPATCH_PAUSE_AT` and `DISPATCH_TAMPER_*` do nothing, and no shipped module reads them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: What a wheel of the project ships (pyproject.toml, [tool.setuptools.packages.find]).
SHIPPED = ("config", "console", "demo", "dispatch", "protocols")
SWITCHES = ("DISPATCH_CRASH_AT", "DISPATCH_PAUSE_AT", "DISPATCH_PAUSE_DIR", "DISPATCH_TAMPER_AT",
            "DISPATCH_TAMPER_ARGUMENTS")
PROBE = """
import json, django
django.setup()
from dispatch.failpoints import failpoint, failpoint_payload
failpoint("claim.before_commit")
print(json.dumps(failpoint_payload("attempt.payload", {"arguments": {"amount": "12.00"}})))
"""


def probe(
    tmp_path: Path, settings_module: str, **switches: str,
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "PYTHONPATH": str(ROOT),
           "DJANGO_SETTINGS_MODULE": settings_module, "DJANGO_DEBUG": "0",
           "SECRET_KEY": "s" * 50, "APP_VAR_DIR": str(tmp_path / "var"), **switches}
    return subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60, check=False)


TAMPER = {"DISPATCH_TAMPER_AT": "attempt.payload",
          "DISPATCH_TAMPER_ARGUMENTS": json.dumps({"amount": "9999.00"})}


def test_production_settings_ignore_the_crash_and_pause_switches(tmp_path: Path) -> None:
    done = probe(tmp_path, "config.settings", DISPATCH_CRASH_AT="claim.before_commit",
                 DISPATCH_PAUSE_AT="claim.before_commit", DISPATCH_PAUSE_DIR=str(tmp_path),
                 DISPATCH_PAUSE_TIMEOUT="30")
    assert done.returncode == 0, done.stderr  # not killed
    assert list(tmp_path.glob("*.reached")) == []  # never paused


def test_production_settings_never_alter_a_payload(tmp_path: Path) -> None:
    done = probe(tmp_path, "config.settings", **TAMPER)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"arguments": {"amount": "12.00"}}


def test_the_test_settings_keep_every_failpoint(tmp_path: Path) -> None:
    # The same probe fires under the test settings: what the fault and race tests rely on.
    crashed = probe(tmp_path, "config.test_settings", DISPATCH_CRASH_AT="claim.before_commit")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    tampered = probe(tmp_path, "config.test_settings", **TAMPER)
    assert json.loads(tampered.stdout) == {"arguments": {"amount": "9999.00"}}, tampered.stderr
    (tmp_path / "claim.before_commit.go").touch()
    paused = probe(tmp_path, "config.test_settings", DISPATCH_PAUSE_AT="claim.before_commit",
                   DISPATCH_PAUSE_DIR=str(tmp_path))
    assert paused.returncode == 0, paused.stderr
    assert (tmp_path / "claim.before_commit.reached").exists()


@pytest.mark.parametrize("switch", SWITCHES)
def test_no_shipped_module_reads_a_failpoint_switch(switch: str) -> None:
    readers = [str(path.relative_to(ROOT)) for package in SHIPPED
               for path in sorted((ROOT / package).rglob("*.py"))
               if path != ROOT / "config" / "test_settings.py" and switch in path.read_text()]
    assert readers == []
