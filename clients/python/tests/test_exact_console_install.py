"""The client stands alone: importing it, and each adapter whose framework is installed, loads
nothing of the server, and `pip install ./clients/python` into a fresh virtualenv gives a
working `exact_console`."""

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
#: Each adapter module of the package, and the frameworks it needs (an extra of the package);
#: the permit verifier (`permits`) is one too, on PyJWT and rfc8785.
ADAPTERS = {"langchain": "langchain_core", "langgraph": "langgraph",
            "openai_agents": "agents", "pydantic_ai": "pydantic_ai", "permits": "jwt rfc8785"}
#: The package's modules that are not adapters: they need nothing but httpx.
CORE = {"__init__", "calling", "_blocking", "_calls", "_extras", "_retry", "_version", "client",
        "errors", "shapes", "tools"}
CHECK = f"""
import importlib, importlib.util, pathlib, sys
import exact_console
with exact_console.Client("http://127.0.0.1:9", "t") as client:
    pass
modules = {{p.stem for p in pathlib.Path(exact_console.__file__).parent.glob("*.py")}}
unknown = sorted(modules - set({CORE!r}) - set({ADAPTERS!r}))
assert not unknown, f"modules neither core nor a known adapter: {{unknown}}"
imported = []
for adapter, framework in sorted({ADAPTERS!r}.items()):
    if adapter in modules and all(importlib.util.find_spec(f) for f in framework.split()):
        importlib.import_module("exact_console." + adapter)
        imported.append(adapter)
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({SERVER!r}))
assert not loaded, loaded
print(exact_console.__file__)
print(" ".join(imported))
"""


def install_copy(tmp_path: Path, extra: str = "") -> tuple[Path, dict[str, str]]:
    """A fresh virtualenv with the client installed from a copy (a build leaves its directories
    behind, and not in the source tree), `extra` resolved against the project's constraints;
    its python and a clean environment. Needs the package index."""
    source = tmp_path / "exact-console"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", "tests"))
    venv.create(tmp_path / "venv", with_pip=True, clear=True)
    python = tmp_path / "venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    constraints = ["-c", str(PACKAGE.parents[1] / "constraints.txt")] if extra else []
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    *constraints, f"{source}[{extra}]" if extra else str(source)],
                   check=True, cwd=tmp_path, env=env, timeout=600)
    return python, env


def test_importing_the_client_loads_nothing_of_the_server() -> None:
    # This interpreter has Django and the server importable: only the client keeps them out.
    env = {**os.environ, "PYTHONPATH": str(PACKAGE)}
    found = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                           cwd=PACKAGE.parents[1], env=env, check=False)
    assert found.returncode == 0, found.stderr
    location, imported = found.stdout.splitlines()
    assert location == str(PACKAGE / "exact_console" / "__init__.py")
    # The dev tools install these frameworks: their adapters import, and load no server either.
    assert {"langchain", "langgraph", "openai_agents", "pydantic_ai", "permits"} <= set(
        imported.split())


@pytest.mark.slow
def test_pip_installs_the_client_alone_into_a_fresh_virtualenv(tmp_path: Path) -> None:
    # Needs the package index for httpx and the build backend.
    python, env = install_copy(tmp_path)
    installed = subprocess.run([python, "-c", CHECK], capture_output=True, text=True,
                               check=False, cwd=tmp_path, env=env)
    assert installed.returncode == 0, installed.stderr
    printed, imported = installed.stdout.splitlines()
    location = Path(printed)
    assert imported == ""  # no framework came with the client alone
    assert location.is_relative_to(tmp_path / "venv"), location  # installed, not the source
    assert (location.parent / "py.typed").is_file()
    django = subprocess.run([python, "-c", "import django"], capture_output=True, check=False,
                            cwd=tmp_path, env=env)
    assert django.returncode != 0  # a fresh environment: nothing else came with it


@pytest.mark.slow
def test_pip_installs_the_openai_agents_extra_and_its_adapter_imports(tmp_path: Path) -> None:
    # The extra's pin resolves with the project's constraints (the SDK wants websockets<17),
    # and the adapter imports in an environment of the client and its framework alone.
    python, env = install_copy(tmp_path, "openai-agents")
    installed = subprocess.run([python, "-c", CHECK], capture_output=True, text=True,
                               check=False, cwd=tmp_path, env=env)
    assert installed.returncode == 0, installed.stderr
    printed, imported = installed.stdout.splitlines()
    assert Path(printed).is_relative_to(tmp_path / "venv")
    assert imported == "openai_agents"  # its framework, and no other, came with the extra


@pytest.mark.slow
def test_a_destination_verifies_a_permit_token_with_the_permits_extra_alone(
        tmp_path: Path) -> None:
    # What a destination installs: the client with its `permits` extra, no server. It verifies
    # the project's golden token with the golden JWKS and loads nothing of the server.
    python, env = install_copy(tmp_path, "permits")
    vectors = PACKAGE.parents[1] / "tests" / "vectors" / "permit_tokens"
    script = f"""
import json, pathlib, sys
from exact_console.permits import verify
here = pathlib.Path({str(vectors)!r})
vectors = json.loads((here / "vectors.json").read_text(encoding="utf-8"))
claims = verify(vectors["token"], json.loads((here / "keys.json").read_text(encoding="utf-8")),
                audience="bank", snapshot=(here / "snapshot.txt").read_text(encoding="utf-8"),
                now=vectors["claims"]["iat"])
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({SERVER!r}))
assert not loaded, loaded
print(claims.sub)
"""
    verified = subprocess.run([python, "-c", script], capture_output=True, text=True,
                              check=False, cwd=tmp_path, env=env)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.strip() == "op_vector_1"
