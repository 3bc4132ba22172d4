"""What a production install holds (docs/deployment.md#what-an-install-holds): the demo is an
extension a deployment asks for, off by default, and the packages only the demo and the
benchmarks use are extras (`demo`, `bench`), never imported by the product. Everything that
runs the demo (scripts/run.sh, docker-compose.yml and its image, the test settings, the
benchmarks) asks for it, and `dev` installs every extra."""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from tests.support.compose import service_environment

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
#: Imported by the demo only (demo/summaries.py, demo/destinations/smtp_sink.py).
DEMO_ONLY = {"babel", "aiosmtpd"}
#: Imported by the benchmarks and the test tools only (bench/run_all.py, bench/peers.py).
BENCH_ONLY = {"rich", "agentbarrier"}
#: The product, as a production process imports it.
PRODUCT = ("protocols", "dispatch", "console", "config")


def name_of(requirement: str) -> str:
    return re.split(r"[\[<>=~!; ]", requirement, maxsplit=1)[0].lower()


def extras_of(requirement: str) -> set[str]:
    found = re.match(r"[^\[]*\[([^\]]*)\]", requirement)
    return {e.strip() for e in found.group(1).split(",")} if found else set()


def test_demo_and_bench_packages_are_extras_and_cryptography_is_declared() -> None:
    required = {name_of(r) for r in PROJECT["dependencies"]}
    assert not required & (DEMO_ONLY | BENCH_ONLY), required & (DEMO_ONLY | BENCH_ONLY)
    # dispatch/signing.py and protocols' verifiers import it directly.
    assert "cryptography" in required
    extras = PROJECT["optional-dependencies"]
    assert {name_of(r) for r in extras["demo"]} >= DEMO_ONLY
    assert {name_of(r) for r in extras["bench"]} >= BENCH_ONLY


def test_dev_installs_every_extra() -> None:
    # scripts/setup.sh installs `.[dev]`: the demo, the benchmarks and their tests need them.
    own = [r for r in PROJECT["optional-dependencies"]["dev"] if name_of(r) == PROJECT["name"]]
    assert own and extras_of(own[0]) >= {"demo", "bench"}, own


def test_the_image_installs_the_demo_extra_and_no_bench_package() -> None:
    # From its hash-locked list (tests/deploy/test_image_lock.py): the demo extra's packages,
    # for the compose demo, and none of the benchmarks'.
    lock = (ROOT / "requirements" / "image.txt").read_text().lower()
    for name in DEMO_ONLY:
        assert re.search(rf"^{name}==", lock, re.MULTILINE), name
    for name in BENCH_ONLY:
        assert not re.search(rf"^{name}==", lock, re.MULTILINE), name
    assert "-r requirements/image.txt" in (ROOT / "Dockerfile").read_text()


def test_the_product_declares_no_import_of_a_demo_or_bench_package() -> None:
    contracts = PYPROJECT["tool"]["importlinter"]["contracts"]
    forbidding = [c for c in contracts if c["type"] == "forbidden"
                  and set(c["forbidden_modules"]) >= DEMO_ONLY | BENCH_ONLY]
    assert forbidding and set(forbidding[0]["source_modules"]) >= set(PRODUCT), forbidding


PROBE = """
import importlib, importlib.abc, json, pkgutil, sys

class Absent(importlib.abc.MetaPathFinder):
    # As in an install without the extras: these packages are not there.
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {absent!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Absent())
import django
django.setup()
for package in {packages!r}:
    root = importlib.import_module(package)
    for found in pkgutil.walk_packages(root.__path__, package + "."):
        if found.name not in {skipped!r} and ".migrations" not in found.name:
            importlib.import_module(found.name)
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}})))
"""


def test_a_production_process_runs_without_the_demo_and_bench_packages(tmp_path: Path) -> None:
    # The production settings with nothing but a secret key (the default extensions, the
    # embedded store), in an interpreter where the extras' packages cannot be imported: every
    # module of the product still imports. (Libraries may try them: structlog uses rich when
    # it is installed, and does without.)
    env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "PYTHONPATH": str(ROOT),
           "DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_DEBUG": "0",
           "SECRET_KEY": "s" * 50, "APP_VAR_DIR": str(tmp_path)}
    code = PROBE.format(absent=sorted(DEMO_ONLY | BENCH_ONLY), packages=PRODUCT,
                        skipped=("config.test_settings",))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    imported = set(json.loads(done.stdout.splitlines()[-1]))
    assert {"dispatch", "console", "protocols", "config", "django", "celery"} <= imported
    assert imported & {"demo", "bench"} == set()


def production_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    for name in ("DJANGO_DEBUG", "DISPATCH_EXTENSIONS", "DATABASE_URL", "CELERY_BROKER_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("APP_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("SECRET_KEY", "s" * 50)
    return runpy.run_path(str(ROOT / "config" / "settings.py"))


def test_the_demo_is_off_unless_asked_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    values = production_settings(monkeypatch, tmp_path)
    assert values["DISPATCH_EXTENSIONS"] == []
    assert "demo" not in values["INSTALLED_APPS"]
    assert "DESTINATIONS" not in values
    monkeypatch.setenv("DISPATCH_EXTENSIONS", "demo.extension")
    asked = runpy.run_path(str(ROOT / "config" / "settings.py"))
    assert asked["DISPATCH_EXTENSIONS"] == ["demo.extension"]
    assert "demo" in asked["INSTALLED_APPS"]


def test_what_runs_the_demo_asks_for_it() -> None:
    run_sh = (ROOT / "scripts" / "run.sh").read_text()
    assert re.search(r'^export DISPATCH_EXTENSIONS="\$\{DISPATCH_EXTENSIONS-demo\.extension\}"$',
                     run_sh, re.M), "scripts/run.sh"
    given = {"SECRET_KEY": "s" * 50, "SIGNING_KEYS": "[]"}
    for service in ("web", "worker", "beat", "mcp", "destinations", "seed"):
        assert service_environment(service, given)["DISPATCH_EXTENSIONS"] == "demo.extension"
    assert "demo.extension" in settings.DISPATCH_EXTENSIONS  # config/test_settings.py
    chaos = (ROOT / "bench" / "chaos_stack.py").read_text()  # the one bench on production settings
    assert '"DISPATCH_EXTENSIONS": "demo.extension"' in chaos
