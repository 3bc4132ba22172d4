"""`migrate` alone makes the login throttle's cache table: a fresh machine needs nothing else."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two full migrations in subprocesses, about 7 s

ROOT = Path(__file__).resolve().parents[2]


def manage(var_dir: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "CACHE_URL", "DJANGO_SETTINGS_MODULE"}}
    env.update(DJANGO_DEBUG="1", APP_VAR_DIR=str(var_dir),
               DJANGO_SETTINGS_MODULE="config.settings")
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
                   capture_output=True, timeout=120)


def tables(database: Path) -> set[str]:
    with sqlite3.connect(database) as db:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def test_migrate_creates_the_cache_table_and_unmigrating_drops_it(tmp_path: Path) -> None:
    manage(tmp_path, "migrate", "--noinput")
    assert "django_cache" in tables(tmp_path / "console.sqlite3")
    manage(tmp_path, "migrate", "console", "zero", "--noinput")
    assert "django_cache" not in tables(tmp_path / "console.sqlite3")
