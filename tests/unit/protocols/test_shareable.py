"""The shareable read grant in the contract and the checker (docs/workflows.md#typing-rules):
only a pure read may declare it; it is part of the fingerprint; the checker lets concurrent
branches share a handle only where every use of it is a read argument of a contract granting it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from demo.contracts import CONTRACTS, build_registry
from protocols.contracts import ApprovalRequirement, ContractRegistry, Effect
from protocols.workflow import CheckedWorkflow, Diagnostics, check_source
from protocols.workflow.compat import classify_change, contract_from_declaration

ROOT = Path(__file__).parents[2] / "workflows"
FINGERPRINTS = {name: f"impl-{name}" for name in CONTRACTS}


def registry(*, shareable_fetch: bool = True) -> ContractRegistry:
    found = build_registry(FINGERPRINTS)
    if shareable_fetch:
        return found
    unshared = ContractRegistry()
    for contract in found:
        unshared.register(replace(contract, shareable=False)
                          if contract.qualified_name == "research.fetch" else contract)
    return unshared


def fetch(**changes: object) -> object:
    return replace(CONTRACTS["research.fetch"]("impl"), **changes)  # type: ignore[arg-type]


def test_the_demo_fetch_grants_shared_reads_and_attest_does_not() -> None:
    found = build_registry(FINGERPRINTS)
    assert found.resolve("research.fetch").shareable
    assert not found.resolve("evidence.attest").shareable


@pytest.mark.parametrize(("changes", "message"), [
    ({"possible_effects": frozenset({Effect.READ, Effect.EXTERNAL_WRITE})},
     "only a read contract"),
    ({"possible_effects": frozenset({Effect.READ, Effect.HUMAN})}, "only a read contract"),
    ({"approval_requirement": ApprovalRequirement("operator", 60)}, "needs no approval"),
    ({"protocol_outcomes": {"completed": "open"}}, "moves no resource"),
    ({"reads": frozenset()}, "names nothing to share"),
])
def test_only_a_pure_read_may_declare_shareable(changes: dict[str, object], message: str
                                                ) -> None:
    with pytest.raises(ValueError, match=message):
        fetch(**changes)


def test_a_write_contract_declaring_shareable_cannot_be_registered() -> None:
    send = CONTRACTS["email.send"]("impl")
    with pytest.raises(ValueError, match=r"email.send: only a read contract.*external_write"):
        replace(send, shareable=True)
    # Nor through its declaration (a contract read back from its canonical form).
    with pytest.raises(ValueError, match="only a read contract"):
        contract_from_declaration({**send.declaration(), "shareable": True})


def test_the_grant_is_in_the_fingerprint_only_where_declared() -> None:
    shared = CONTRACTS["research.fetch"]("impl")
    unshared = replace(shared, shareable=False)
    assert shared.declaration()["shareable"] is True
    assert "shareable" not in unshared.declaration()  # unchanged for contracts without it
    assert shared.fingerprint != unshared.fingerprint
    assert contract_from_declaration(shared.declaration()).fingerprint == shared.fingerprint
    assert contract_from_declaration(unshared.declaration()).fingerprint == unshared.fingerprint


def test_withdrawing_the_grant_breaks_callers_and_granting_it_does_not() -> None:
    shared = CONTRACTS["research.fetch"]("impl")
    unshared = replace(shared, shareable=False)
    withdrawn = classify_change(shared, unshared)
    assert withdrawn.breaking
    assert [c.field for c in withdrawn.changes] == ["shareable"]
    granted = classify_change(unshared, shared)
    assert not granted.breaking and granted.level.value == "compatible"


@pytest.mark.parametrize("name", ["ok/parallel_fetch_one_question.yaml",
                                  "ok/parallel_loop_fetch_one_question.yaml",
                                  "runtime/parallel_fetch_sources.yaml"])
def test_the_checker_accepts_branches_sharing_a_shareable_read_only_under_the_grant(
    name: str,
) -> None:
    text = (ROOT / name).read_text(encoding="utf-8")
    assert isinstance(check_source(text, registry(), filename=name), CheckedWorkflow)
    refused = check_source(text, registry(shareable_fetch=False), filename=name)
    assert isinstance(refused, Diagnostics)
    assert {d.code.value for d in refused} == {"AGL-E012"}


@pytest.mark.parametrize("name", ["err/e012_parallel_attest_one_report.yaml",
                                  "err/e012_parallel_loop_attest_one_report.yaml",
                                  "err/e012_parallel_fetch_and_edit.yaml",
                                  "err/e012_parallel_shared_draft.yaml",
                                  "err/e012_parallel_shared_permit.yaml",
                                  "err/e012_parallel_same_proposal.yaml"])
def test_the_checker_still_refuses_sharing_anything_else(name: str) -> None:
    text = (ROOT / name).read_text(encoding="utf-8")
    refused = check_source(text, registry(), filename=name)
    assert isinstance(refused, Diagnostics)
    assert "AGL-E012" in {d.code.value for d in refused}


def test_a_shared_read_beside_an_exclusive_use_points_at_the_exclusive_use() -> None:
    name = "err/e012_parallel_fetch_and_edit.yaml"
    refused = check_source((ROOT / name).read_text(encoding="utf-8"), registry(),
                           filename=name)
    assert isinstance(refused, Diagnostics)
    [diagnostic] = list(refused)
    assert "`question` is used by parallel branches `fetch` and `reword`" in diagnostic.message
    assert (diagnostic.span.line, diagnostic.span.column) == (20, 17)  # the edit


def test_any_other_use_of_the_handle_is_exclusive() -> None:
    """Only the handle passed whole as a `reads` argument is a shared use: a `let` is not."""
    text = (ROOT / "ok/parallel_fetch_one_question.yaml").read_text(encoding="utf-8")
    text = text.replace("        - dispatch: $fetch_b\n", "        - dispatch: $fetch_b\n"
                        "        - let: q\n          value: $question\n")
    refused = check_source(text, registry(), filename="let.yaml")
    assert isinstance(refused, Diagnostics)
    assert {d.code.value for d in refused} == {"AGL-E012"}
