"""The client stands alone: importing it loads nothing of the server, and `pip install
./clients/python` into a fresh virtualenv gives a working `exact_console`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]
SERVER = ("django", "rest_framework", "celery", "protocols", "dispatch", "console", "demo",
          "config")
CHECK = f"""
import sys
import exact_console
with exact_console.Client("http://127.0.0.1:9", "t") as client:
    pass
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({SERVER!r}))
assert not loaded, loaded
print(exact_console.__file__)
"""


def test_importing_the_client_loads_nothing_of_the_server() -> None:
    # This interpreter has Django and the server importable: only the client keeps them out.
    env = {**os.environ, "PYTHONPATH": str(PACKAGE)}
    found = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                           cwd=PACKAGE.parents[1], env=env, check=False)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == str(PACKAGE / "exact_console" / "__init__.py")


@pytest.mark.slow
def test_pip_installs_the_client_alone_into_a_fresh_virtualenv(tmp_path: Path) -> None:
    # Needs the package index for httpx and the build backend. Built from a copy: a build
    # leaves its directories behind, and not in the source tree.
    source = tmp_path / "exact-console"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", "tests"))
    venv.create(tmp_path / "venv", with_pip=True, clear=True)
    python = tmp_path / "venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    str(source)], check=True, cwd=tmp_path, env=env, timeout=600)
    installed = subprocess.run([python, "-c", CHECK], capture_output=True, text=True,
                               check=False, cwd=tmp_path, env=env)
    assert installed.returncode == 0, installed.stderr
    location = Path(installed.stdout.strip())
    assert location.is_relative_to(tmp_path / "venv"), location  # installed, not the source
    assert (location.parent / "py.typed").is_file()
    django = subprocess.run([python, "-c", "import django"], capture_output=True, check=False,
                            cwd=tmp_path, env=env)
    assert django.returncode != 0  # a fresh environment: nothing else came with it
