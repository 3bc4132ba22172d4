"""Contract compatibility (docs/design.md#extensions): is a new contract a safe replacement for the
old one?

`classify_change(old, new)` lists every difference with whether it breaks callers. Breaking:
added authority or effects, strengthened preconditions (a narrower input schema, changed
protocol preconditions), changed protocol outcomes or approval bindings, weaker idempotency,
another destination or normalization, a wider output, a withdrawn shareable read grant.
Compatible: fewer effects or authority keys, a wider input schema, stronger idempotency,
scheduling changes within budget, a granted `shareable`.

Separately, `resume_compatible` is stricter than source compatibility: a pending approval binds
the contract fingerprint, so it can dispatch only if the fingerprints are equal; every change,
compatible or not, changes the fingerprint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from protocols.contracts import (
    RECONCILIATION_REACH,
    ApprovalRequirement,
    AttestationRequirement,
    AuthorityRequirement,
    Effect,
    EvidenceRole,
    Idempotency,
    OperationContract,
    Reconciliation,
    SchedulingContract,
)
from protocols.workflow.schema_compat import narrowings

IDEMPOTENCY_STRENGTH = {Idempotency.NONE: 0, Idempotency.RECEIVER_DEDUP: 1,
                        Idempotency.IDEMPOTENT: 2}


class Level(StrEnum):
    IDENTICAL = "identical"
    COMPATIBLE = "compatible"
    BREAKING = "breaking"


@dataclass(frozen=True)
class Change:
    field: str
    breaking: bool
    reason: str


@dataclass(frozen=True)
class Compatibility:
    """The classification; `resume_compatible` says whether pending approvals stay valid."""

    level: Level
    changes: tuple[Change, ...]
    old_fingerprint: str
    new_fingerprint: str

    @property
    def breaking(self) -> bool:
        return self.level is Level.BREAKING

    @property
    def resume_compatible(self) -> bool:
        return self.old_fingerprint == self.new_fingerprint

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(c.reason for c in self.changes if c.breaking)

    def as_json(self) -> dict[str, Any]:
        return {"level": self.level.value, "breaking": self.breaking,
                "resume_compatible": self.resume_compatible,
                "old_fingerprint": self.old_fingerprint, "new_fingerprint": self.new_fingerprint,
                "changes": [{"field": c.field, "breaking": c.breaking, "reason": c.reason}
                            for c in self.changes]}


def classify_change(old: OperationContract, new: OperationContract) -> Compatibility:
    """Every difference between `old` and `new`, and whether callers of `old` break."""
    changes: list[Change] = []

    def add(name: str, breaking: bool, reason: str) -> None:
        changes.append(Change(name, breaking, reason))

    if old.qualified_name != new.qualified_name:
        add("qualified_name", True, f"renamed {old.qualified_name} -> {new.qualified_name}")
    if old.contract_version != new.contract_version:
        add("contract_version", False,
            f"version {old.contract_version} -> {new.contract_version}")
    if old.implementation_fingerprint != new.implementation_fingerprint:
        add("implementation_fingerprint", False, "the handler implementation changed")
    _authority(old.authority_requirements, new.authority_requirements, add)
    added = sorted(e.value for e in new.possible_effects - old.possible_effects)
    removed = sorted(e.value for e in old.possible_effects - new.possible_effects)
    if added:
        add("possible_effects", True, f"adds effects {', '.join(added)}")
    if removed:
        add("possible_effects", False, f"drops effects {', '.join(removed)}")
    for reason in narrowings(old.input_type, new.input_type, "input"):
        add("input_type", True, f"strengthens preconditions: {reason}")
    if old.input_type != new.input_type and not any(c.field == "input_type" for c in changes):
        add("input_type", False, "the input schema accepts at least what it accepted")
    for reason in narrowings(new.output_type, old.output_type, "output"):
        add("output_type", True, f"may return what callers did not expect: {reason}")
    if old.output_type != new.output_type and not any(c.field == "output_type" for c in changes):
        add("output_type", False, "the output schema is narrower or equal")
    _mapping("protocol_preconditions", "protocol preconditions", old.protocol_preconditions,
             new.protocol_preconditions, add)
    _mapping("protocol_outcomes", "protocol outcome states", old.protocol_outcomes,
             new.protocol_outcomes, add)
    _approval(old.approval_requirement, new.approval_requirement, add)
    _idempotency(old.idempotency_contract, new.idempotency_contract, add)
    _scheduling(old.scheduling_contract, new.scheduling_contract, add)
    if old.destination != new.destination:
        add("destination", True, f"destination {old.destination!r} -> {new.destination!r}")
    _reconciliation(old.reconciliation, new.reconciliation, add)
    if dict(old.normalizers) != dict(new.normalizers):
        add("normalizers", True, "argument normalization changed: equal inputs may no longer "
            "canonicalize to the same snapshot")
    # The evidence chain (docs/design.md#evidence): which resources are only read, which evidence
    # record the dispatcher issues, and what a publication must rest on: any change is another
    # meaning.
    if old.reads != new.reads:
        add("reads", True, f"read-only resource arguments {sorted(old.reads)} -> "
            f"{sorted(new.reads)}")
    if old.evidence != new.evidence:
        add("evidence", True, f"the evidence record issued on completion "
            f"{_value(old.evidence)} -> {_value(new.evidence)}")
    if old.attestation != new.attestation:
        add("attestation", True, "the attestation a run must rest on changed")
    if old.shareable != new.shareable:
        # Withdrawing the grant refuses workflows whose branches share a read argument.
        add("shareable", old.shareable, "shareable read grant "
            + ("withdrawn: branches sharing a read argument are refused" if old.shareable
               else "granted: branches may share its read arguments"))
    if old.fingerprint == new.fingerprint:
        level = Level.IDENTICAL
    elif any(c.breaking for c in changes):
        level = Level.BREAKING
    else:
        level = Level.COMPATIBLE
    return Compatibility(level, tuple(changes), old.fingerprint, new.fingerprint)


Add = Callable[[str, bool, str], None]


def _authority(old: tuple[AuthorityRequirement, ...], new: tuple[AuthorityRequirement, ...],
               add: Add) -> None:
    before = {r.key: r.pointer for r in old}
    after = {r.key: r.pointer for r in new}
    for key in sorted(after.keys() - before.keys()):
        add("authority_requirements", True, f"adds authority key {key!r}")
    for key in sorted(before.keys() - after.keys()):
        add("authority_requirements", False, f"drops authority key {key!r}")
    for key in sorted(before.keys() & after.keys()):
        if before[key] != after[key]:
            add("authority_requirements", True,
                f"authority key {key!r} selects {after[key]} instead of {before[key]}")


def _mapping(name: str, label: str, old: Mapping[str, str], new: Mapping[str, str],
             add: Add) -> None:
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            add(name, True, f"{label}: {key!r} {old.get(key)!r} -> {new.get(key)!r}")


def _approval(old: ApprovalRequirement | None, new: ApprovalRequirement | None,
              add: Add) -> None:
    if old == new:
        return
    if old is None:
        add("approval_requirement", True, "now requires an approval")
    elif new is None:
        add("approval_requirement", True, "no longer requires an approval: pending approvals "
            "and the workflows that request them bind another contract")
    elif old.role != new.role:
        add("approval_requirement", True, f"approver role {old.role!r} -> {new.role!r}")
    else:
        add("approval_requirement", True,
            f"approval expiry {old.expires_in}s -> {new.expires_in}s changes the binding")


def _idempotency(old: Idempotency, new: Idempotency, add: Add) -> None:
    if old == new:
        return
    weaker = IDEMPOTENCY_STRENGTH[new] < IDEMPOTENCY_STRENGTH[old]
    add("idempotency_contract", weaker, f"idempotency {old.value} -> {new.value}"
        + (": retries that were safe are no longer" if weaker else ""))


def _reconciliation(old: Reconciliation, new: Reconciliation, add: Add) -> None:
    if old is new:
        return
    wider = RECONCILIATION_REACH[new] > RECONCILIATION_REACH[old]
    add("reconciliation", wider, f"reconciliation {old.value} -> {new.value}"
        + (": lookups may settle what they could not, pending unknowns included" if wider
           else ": lookups settle less; more is left to an admin"))


def _scheduling(old: SchedulingContract, new: SchedulingContract, add: Add) -> None:
    if new.budget_cost > old.budget_cost:
        add("scheduling_contract", True,
            f"budget cost {old.budget_cost} -> {new.budget_cost} may exceed callers' budgets")
    elif old != new:
        add("scheduling_contract", False, "timeout, attempts or cost changed within budget")


def contract_from_declaration(data: Mapping[str, Any]) -> OperationContract:
    """The inverse of `OperationContract.declaration()`; `ValueError` on a bad shape."""
    try:
        approval = data["approval_requirement"]
        scheduling = data.get("scheduling_contract") or {}
        return OperationContract(
            qualified_name=_str(data["qualified_name"]),
            contract_version=int(data["contract_version"]),
            implementation_fingerprint=_str(data["implementation_fingerprint"]),
            input_type=dict(data["input_type"]),
            output_type=dict(data["output_type"]),
            authority_requirements=tuple(
                AuthorityRequirement(_str(r["key"]), _str(r["pointer"]))
                for r in data["authority_requirements"]),
            possible_effects=frozenset(Effect(e) for e in data["possible_effects"]),
            protocol_preconditions=dict(data.get("protocol_preconditions") or {}),
            protocol_outcomes=dict(data.get("protocol_outcomes") or {}),
            approval_requirement=None if approval is None else ApprovalRequirement(
                _str(approval["role"]), int(approval["expires_in"])),
            idempotency_contract=Idempotency(data.get("idempotency_contract", "none")),
            scheduling_contract=SchedulingContract(
                timeout=float(scheduling.get("timeout", 15.0)),
                max_attempts=int(scheduling.get("max_attempts", 1)),
                budget_cost=int(scheduling.get("budget_cost", 1))),
            destination=_str(data.get("destination", "")),
            normalizers=dict(data.get("normalizers") or {}),
            reconciliation=Reconciliation(data.get("reconciliation", "none")),
            reads=frozenset(_str(name) for name in data.get("reads") or ()),
            evidence=None if data.get("evidence") is None else EvidenceRole(data["evidence"]),
            attestation=None if data.get("attestation") is None else AttestationRequirement(
                _str(data["attestation"]["argument"]), _str(data["attestation"]["report"]),
                _str(data["attestation"]["policy"])),
            shareable=data.get("shareable") is True,
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a contract declaration: {exc!r}") from None


def _value(role: EvidenceRole | None) -> str:
    return "none" if role is None else role.value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def render_text(result: Compatibility) -> str:
    """One line per change (`breaking:`/`compatible:`), then the verdict and resume note."""
    lines = [f"{'breaking' if c.breaking else 'compatible'}: {c.field}: {c.reason}"
             for c in result.changes]
    lines.append(f"verdict: {result.level.value}")
    lines.append("pending approvals: " + (
        "remain valid (same fingerprint)" if result.resume_compatible else
        f"cannot dispatch under the new contract (fingerprint {result.old_fingerprint} -> "
        f"{result.new_fingerprint}); they must be proposed and approved again"))
    return "\n".join(lines)
