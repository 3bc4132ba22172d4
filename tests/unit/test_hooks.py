"""What an extension registers with a contract besides its handler (`dispatch.hooks`): an
evidence role needs its outcome hook, an attestation requirement its admission check, and only
the one owner of an operation's state mints the context an outcome hook (and so a receipt or
an attestation) is written with."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from demo.contracts import evidence_attest, report_publish
from demo.handlers import EvidenceAttestHandler, ReportPublishHandler
from demo.hooks import attestation_check, evidence_issue
from dispatch.hooks import OutcomeContext
from dispatch.runtime import Runtime
from protocols.contracts import ContractRegistry
from protocols.grants import Policy
from protocols.lifecycle import OperationState

ROOT = Path(__file__).resolve().parents[2]


def fresh_runtime() -> Runtime:
    return Runtime(registry=ContractRegistry(), handlers={},
                   policy=Policy(allowed_effects=frozenset()))


def test_an_evidence_role_without_its_outcome_hook_is_refused() -> None:
    handler = EvidenceAttestHandler()
    contract = evidence_attest(handler.implementation_fingerprint)
    with pytest.raises(ValueError, match="no outcome hook issues it"):
        fresh_runtime().register(contract, handler)
    runtime = fresh_runtime()
    runtime.register(contract, handler, on_outcome=evidence_issue)
    assert runtime.outcome_hooks[("evidence.attest", 1)] is evidence_issue


def test_an_attestation_requirement_without_its_admission_check_is_refused() -> None:
    handler = ReportPublishHandler()
    contract = report_publish(handler.implementation_fingerprint)
    with pytest.raises(ValueError, match="no admission check enforces it"):
        fresh_runtime().register(contract, handler, on_outcome=evidence_issue)
    runtime = fresh_runtime()
    runtime.register(contract, handler, on_outcome=evidence_issue,
                     admission=(attestation_check,))
    assert runtime.admission_checks[("report.publish", 1)] == (attestation_check,)
    # Without the requirement, nothing is asked of it.
    plain = replace(contract, attestation=None, evidence=None)
    fresh_runtime().register(plain, handler)


def test_an_outcome_context_is_minted_by_operation_move_only() -> None:
    with pytest.raises(TypeError, match="minted by operation_move only"):
        OutcomeContext(operation=None, contract=None, target=OperationState.COMPLETED,  # type: ignore[arg-type]
                       result=None, arguments={}, now=None)  # type: ignore[arg-type]
    callers = []
    for package in ("protocols", "dispatch", "console", "demo"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            callers += [path.relative_to(ROOT).as_posix() for node in ast.walk(tree)
                        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id == "outcome_context"]
    assert callers == ["dispatch/services/operations.py"]
