"""`manage.py format_workflow`, run as a subprocess: rewrites files in place, `--check` exits 1
naming each unformatted file, `--diff` shows the change, `-` formats standard input, and a file
the reader refuses exits 2 untouched (docs/workflows.md#canonical-layout)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each case starts Django in a subprocess (several seconds)

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
MESSY = "version: 1\nname:   \"messy\"   # named\nsteps:\n- receive:   host\n  bind: m\n"
TIDY = "version: 1\nname: messy  # named\nsteps:\n  - receive: host\n    bind: m\n"


def manage(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.test_settings", "PYTHONPATH": "."}
    return subprocess.run([sys.executable, "manage.py", "format_workflow", *args], cwd=ROOT,
                          env=env, input=stdin, capture_output=True, text=True, timeout=120,
                          check=False)


def test_check_names_unformatted_files_and_writes_nothing(tmp_path: Path) -> None:
    messy, tidy = tmp_path / "messy.yaml", tmp_path / "tidy.yaml"
    messy.write_text(MESSY, encoding="utf-8")
    tidy.write_text(TIDY, encoding="utf-8")
    done = manage("--check", str(messy), str(tidy))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"would reformat {messy}"]
    assert str(messy) in done.stderr and str(tidy) not in done.stderr
    assert messy.read_text(encoding="utf-8") == MESSY
    clean = manage("--check", str(tidy))
    assert (clean.returncode, clean.stdout) == (0, "")


def test_formats_in_place_then_check_passes(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(HERE / "ok", corpus)
    (corpus / "messy.yaml").write_text(MESSY, encoding="utf-8")
    done = manage(str(corpus))
    assert done.returncode == 0, done.stderr
    assert f"reformatted {corpus / 'messy.yaml'}" in done.stdout.splitlines()
    assert (corpus / "messy.yaml").read_text(encoding="utf-8") == TIDY
    again = manage("--check", str(corpus))
    assert (again.returncode, again.stdout) == (0, ""), again.stdout + again.stderr


def test_diff_prints_the_change_and_writes_nothing(tmp_path: Path) -> None:
    messy = tmp_path / "messy.yaml"
    messy.write_text(MESSY, encoding="utf-8")
    done = manage("--diff", str(messy))
    assert done.returncode == 0, done.stderr
    assert f"--- {messy} (original)" in done.stdout
    assert "-- receive:   host" in done.stdout and "+  - receive: host" in done.stdout
    assert messy.read_text(encoding="utf-8") == MESSY


def test_stdin_prints_the_formatted_text() -> None:
    done = manage("-", stdin=MESSY)
    assert (done.returncode, done.stdout) == (0, TIDY), done.stderr
    as_json = manage("-", "--stdin-filename", "w.json",
                     stdin='{"version": 1, "name": "j", "steps": []}')
    assert as_json.stdout == '{\n  "version": 1,\n  "name": "j",\n  "steps": []\n}\n'


def test_a_file_the_reader_refuses_exits_two_untouched(tmp_path: Path) -> None:
    source = HERE / "err" / "e017_duplicate_key.yaml"
    broken = tmp_path / source.name
    shutil.copy(source, broken)
    done = manage(str(broken))
    assert done.returncode == 2
    assert f"{broken}:8:5: error[AGL-E017]: duplicate key 'bind'" in done.stderr
    assert broken.read_text(encoding="utf-8") == source.read_text(encoding="utf-8")
