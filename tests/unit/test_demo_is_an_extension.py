"""The runtime holds no demo: the demo contracts, handlers and resource kind come only from the
extension `settings.DISPATCH_EXTENSIONS` names, and no module of the runtime or the console
imports the demo package."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from demo.contracts import EMAIL_DRAFT_KIND, QUESTION_KIND, REPORT_KIND
from demo.tables import EMAIL_DRAFT
from dispatch.runtime import get_runtime
from protocols.contracts import ResourceKind
from protocols.denials import Denial, DenialCode

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_PACKAGES = ("dispatch", "console")


def test_without_extensions_the_runtime_registers_nothing(
    settings: Any, fresh_runtime: None
) -> None:
    from dispatch.services.resources import resource_kind

    settings.DISPATCH_EXTENSIONS = []
    runtime = get_runtime()
    assert list(runtime.registry) == []
    assert runtime.handlers == {}
    assert runtime.resource_kinds == {}
    with pytest.raises(Denial) as refused:
        runtime.contract("email.send")
    assert refused.value.code == DenialCode.UNKNOWN_OPERATION
    with pytest.raises(Denial) as refused:
        resource_kind("email_draft")
    assert refused.value.code == DenialCode.SCHEMA_INVALID


def test_the_default_extension_is_the_demo(fresh_runtime: None) -> None:
    runtime = get_runtime()
    assert sorted(c.qualified_name for c in runtime.registry) == [
        "crm.lookup", "email.send", "evidence.attest", "payments.transfer", "report.publish",
        "research.fetch"]
    assert {key: type(h).__name__ for key, h in runtime.handlers.items()} == {
        ("crm.lookup", 1): "CrmLookupHandler",
        ("email.send", 1): "EmailSendHandler",
        ("evidence.attest", 1): "EvidenceAttestHandler",
        ("payments.transfer", 1): "PaymentsTransferHandler",
        ("report.publish", 1): "ReportPublishHandler",
        ("research.fetch", 1): "ResearchFetchHandler",
    }
    for contract in runtime.registry:
        handler = runtime.handler(contract)
        assert contract.implementation_fingerprint == type(handler).implementation_fingerprint
        assert contract.implementation_fingerprint.startswith("sha256:")
    assert runtime.resource_kinds == {"email_draft": EMAIL_DRAFT_KIND,
                                      "question": QUESTION_KIND, "report": REPORT_KIND}


def test_a_resource_kind_needs_its_declared_protocol(fresh_runtime: None) -> None:
    runtime = get_runtime()
    undeclared = ResourceKind(name="invoice", protocol=EMAIL_DRAFT, payload_schema={})
    with pytest.raises(ValueError, match="invoice"):
        runtime.register_resource_kind(undeclared)
    assert runtime.register_resource_kind(EMAIL_DRAFT_KIND) is EMAIL_DRAFT_KIND
    other = ResourceKind(name="email_draft", protocol=EMAIL_DRAFT, payload_schema={})
    with pytest.raises(ValueError, match="already registered"):
        runtime.register_resource_kind(other)
    assert runtime.resource_kinds["email_draft"] is EMAIL_DRAFT_KIND


def _imported_names(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value  # a dotted name handed to importlib, as settings name extensions


@pytest.mark.parametrize("package", RUNTIME_PACKAGES)
def test_no_module_of_the_runtime_names_the_demo(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    found = [(str(path.relative_to(ROOT)), name) for path in files
             for name in _imported_names(path) if name.split(".")[0] == "demo"]
    assert found == []


PROBE = """
import importlib, json, pkgutil, sys
import django
django.setup()
names = []
for package in {packages!r}:
    root = importlib.import_module(package)
    names += [m.name for m in pkgutil.walk_packages(root.__path__, package + ".")]
for name in names:
    importlib.import_module(name)
from dispatch.runtime import get_runtime
runtime = get_runtime()
print(json.dumps({{"modules": len(names), "contracts": [c.qualified_name for c in runtime.registry],
                   "demo": sorted(m for m in sys.modules if m.split(".")[0] == "demo")}}))
"""


def test_importing_the_whole_runtime_without_extensions_loads_no_demo(tmp_path: Path) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT),
           "DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_DEBUG": "1",
           "APP_VAR_DIR": str(tmp_path), "DISPATCH_EXTENSIONS": ""}
    done = subprocess.run([sys.executable, "-c", PROBE.format(packages=RUNTIME_PACKAGES)],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["modules"] > 20
    assert found["contracts"] == []
    assert found["demo"] == []
