"""The repository holds source, not what running it generates, and git ignores what running it
writes (the var folder, the filesystem broker's folders, databases, caches)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: What a run, a build or an editor leaves behind; none of it belongs in `git ls-files`.
GENERATED = re.compile(r"""
    (^|/)__pycache__/ | \.py[cod]$ | \.sqlite3(-\w+)?$ | (^|/)var/ | (^|/)control/
    | \.exchange$ | (^|/)\.venv(/|$) | \.egg-info(/|$) | (^|/)\.(mypy|ruff|pytest)_cache/
    | (^|/)\.hypothesis/ | (^|/)(build|dist|artifacts)/
""", re.VERBOSE)

#: Paths a run writes (settings' defaults, kombu's own default control folder).
WRITTEN = [
    "var/db.sqlite3",
    "var/demo/agent-token",  # the demo agent's bearer token, which seed_demo keeps
    "var/broker/queue/0001.msg",
    "var/broker/processed/0001.msg",
    "var/broker/control/dispatch.exchange",
    "control/dispatch.exchange",
    "test-1234.sqlite3",
    "dispatch/__pycache__/models.cpython-312.pyc",
    "console.egg-info/PKG-INFO",
]


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module", autouse=True)
def _checkout() -> None:
    if _git("rev-parse", "--is-inside-work-tree").stdout.strip() != "true":
        pytest.skip("not a git checkout (an installed copy or an image)")


def test_the_pattern_recognises_generated_files() -> None:
    assert all(GENERATED.search(path) for path in WRITTEN)
    assert not GENERATED.search("dispatch/models/base.py")
    assert not GENERATED.search("docs/architecture.md")


def test_git_tracks_nothing_generated() -> None:
    tracked = _git("ls-files").stdout.splitlines()
    assert "pyproject.toml" in tracked
    assert [path for path in tracked if GENERATED.search(path)] == []


@pytest.mark.parametrize("path", WRITTEN)
def test_git_ignores_what_a_run_writes(path: str) -> None:
    # --no-index: the verdict of the ignore rules, even for a path that is tracked.
    assert _git("check-ignore", "--quiet", "--no-index", path).returncode == 0, path


def test_the_filesystem_broker_writes_only_under_its_folder(tmp_path: Path) -> None:
    """kombu's `control_folder` defaults to `control/` in the working directory, which is how
    an exchange table once got committed; every folder it uses sits in the broker folder."""
    probe = (
        "import json\n"
        "from config import settings\n"
        "print(json.dumps({'broker': str(settings.BROKER_DIR),"
        " 'options': settings.CELERY_BROKER_TRANSPORT_OPTIONS}))\n"
    )
    environment = {**os.environ, "CELERY_BROKER_URL": "filesystem://", "DJANGO_DEBUG": "1",
                   "APP_VAR_DIR": str(tmp_path / "var"), "PYTHONPATH": str(ROOT)}
    completed = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=environment,
                               capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr
    found = json.loads(completed.stdout)
    folders = {key: Path(value) for key, value in found["options"].items()
               if key.endswith("_folder") or key.startswith("data_folder")}
    assert set(folders) >= {"control_folder", "data_folder_in", "data_folder_out",
                            "processed_folder"}
    broker = Path(found["broker"])
    assert all(path.is_relative_to(broker) for path in folders.values()), folders
    assert not (tmp_path / "control").exists()
