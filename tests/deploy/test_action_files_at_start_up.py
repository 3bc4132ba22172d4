"""No process starts on an invalid HTTP action file (docs/design.md#http-actions,
docs/actions.md): the web process (WSGI and ASGI), the worker and `manage.py check` exit
non-zero naming the file, its line and the key, and start with the file once it is valid."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_http_action_files import VALID

ROOT = Path(__file__).resolve().parents[2]

INVALID = VALID.replace("idempotency: receiver_dedup", "idempotency: maybe")
WHERE = "helpdesk.yaml:19:14: idempotency: must be receiver_dedup"


def child(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.test_settings",
           "ACTIONS_DIR": str(folder), "PYTHONPATH": f"{ROOT}:{ROOT / 'clients/python'}"}
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def actions(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "actions"
    folder.mkdir(exist_ok=True)
    (folder / "helpdesk.yaml").write_text(text, encoding="utf-8")
    return folder


@pytest.mark.parametrize("entry", ["config.wsgi", "config.asgi"])
def test_the_web_process_refuses_to_start(tmp_path: Path, entry: str) -> None:
    result = child(actions(tmp_path, INVALID), "-c", f"import {entry}")
    assert result.returncode != 0
    assert "ActionsError" in result.stderr  # an ImproperlyConfigured
    assert WHERE in result.stderr
    assert child(actions(tmp_path, VALID), "-c", f"import {entry}").returncode == 0


def test_the_worker_refuses_to_start(tmp_path: Path) -> None:
    result = child(actions(tmp_path, INVALID), "-m", "celery", "-A", "config", "worker",
                   "--pool", "solo", "--without-mingle", "--without-gossip",
                   "--loglevel", "WARNING")
    assert result.returncode != 0
    assert WHERE in result.stderr


def test_manage_py_check_and_check_actions_name_the_line(tmp_path: Path) -> None:
    folder = actions(tmp_path, INVALID)
    checked = child(folder, "manage.py", "check")
    assert checked.returncode == 1
    assert "dispatch.E011" in checked.stderr
    assert WHERE in checked.stderr
    listed = child(folder, "manage.py", "check_actions")
    assert listed.returncode == 1
    assert listed.stdout.startswith(f"{folder / 'helpdesk.yaml'}:19:14: idempotency:")
