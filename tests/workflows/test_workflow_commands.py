"""`manage.py check_workflow` and `manage.py check_compat`, run as subprocesses."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from demo.contracts import email_send
from protocols.contracts import Effect

pytestmark = pytest.mark.slow  # each case starts Django in a subprocess (several seconds)

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
OK = sorted((HERE / "ok").glob("*.*"))
HEADER = re.compile(
    r"^(?P<file>\S+):(?P<line>\d+):(?P<col>\d+): error\[(?P<code>AGL-E\d{3})\]: .+$")


def manage(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.test_settings", "PYTHONPATH": "."}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_clean_files_print_ok_and_exit_zero() -> None:
    done = manage("check_workflow", *map(relative, OK))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(OK)
    for path, line in zip(OK, lines, strict=True):
        assert line.startswith(f"{relative(path)}: ok (workflow ")


def test_errors_print_like_a_compiler_and_exit_one() -> None:
    path = relative(HERE / "err" / "e005_bool_if_dispatch.yaml")
    done = manage("check_workflow", relative(OK[0]), path)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{relative(OK[0])}: ok")
    match = HEADER.match(lines[1])
    assert match is not None, lines[1]
    assert match.group("file", "line", "col", "code") == (path, "18", "9", "AGL-E005")
    assert lines[2] == "  required: a permit bound to `proposal`; actual: no permit"
    assert lines[3].startswith("  note: the `if` on `$approved` does not authorize")
    assert lines[4].startswith("  help: obtain the permit from the Granted arm")
    assert lines[-1] == "1 error in 1 file"
    assert "failed the check" in done.stderr


def test_json_output_and_unreadable_files() -> None:
    bad = relative(HERE / "err" / "e013_model_granted.yaml")
    done = manage("check_workflow", "--json", relative(OK[0]), bad, "no/such/workflow.yaml")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["ok"] is False
    first, second, missing = report["files"]
    assert first["ok"] is True and first["diagnostics"] == []
    assert first["contracts"] and set(first["effects"]) <= {"human", "external_write", "read",
                                                             "financial_write"}
    [diagnostic] = second["diagnostics"]
    assert (diagnostic["code"], diagnostic["line"], diagnostic["column"]) == ("AGL-E013", 23, 21)
    assert (diagnostic["end_line"], diagnostic["end_column"]) == (23, 28)  # `$permit`
    assert diagnostic["file"] == bad
    assert diagnostic["path"] == "steps[2].arms.Granted[0].permit"
    assert diagnostic["required"] and diagnostic["actual"] and diagnostic["help"]
    [unreadable] = missing["diagnostics"]
    assert unreadable["code"] == "AGL-E017"
    assert unreadable["message"].startswith("cannot read the workflow")


def declaration(tmp_path: Path, name: str, **changes: Any) -> str:
    contract = dataclasses.replace(email_send("impl-email-1"), **changes)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(contract.declaration()), encoding="utf-8")
    return str(path)


def test_check_compat_compatible_still_invalidates_pending_approvals(tmp_path: Path) -> None:
    done = manage("check_compat", declaration(tmp_path, "old"),
                  declaration(tmp_path, "new", implementation_fingerprint="impl-email-2"))
    assert done.returncode == 0, done.stderr
    assert "compatible: implementation_fingerprint: the handler implementation changed" in \
        done.stdout
    assert "verdict: compatible" in done.stdout
    assert "pending approvals: cannot dispatch under the new contract" in done.stdout


def test_check_compat_breaking_exits_one(tmp_path: Path) -> None:
    new = declaration(tmp_path, "new", possible_effects=frozenset(
        {Effect.EXTERNAL_WRITE, Effect.FINANCIAL_WRITE}))
    done = manage("check_compat", declaration(tmp_path, "old"), new)
    assert done.returncode == 1
    assert "breaking: possible_effects: adds effects financial_write" in done.stdout
    assert "verdict: breaking" in done.stdout
    as_json = manage("check_compat", "--json", declaration(tmp_path, "old"), new)
    assert as_json.returncode == 1
    result = json.loads(as_json.stdout)
    assert result["level"] == "breaking" and result["resume_compatible"] is False


def test_check_compat_refuses_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}", encoding="utf-8")
    done = manage("check_compat", declaration(tmp_path, "old"), str(bad))
    assert done.returncode == 2
    assert "bad.json" in done.stderr
