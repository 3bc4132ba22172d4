"""Operation contracts, their fingerprints and the contract registry
(docs/design.md#contracts, #extensions).

A contract is a trusted declaration about a host implementation. Its fingerprint is the digest of
its canonical encoding, which includes the handler's implementation fingerprint, so a handler
whose contract differs cannot silently replace a checked one, and a proposal made under one
fingerprint cannot dispatch under another.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

from protocols.canonical import digest
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import ResourceProtocol, protocol_tables
from protocols.normalizers import NORMALIZERS

# `compile_schema` and `schema_errors` are re-exported: callers import them from here.
from protocols.schemas import compile_schema as compile_schema
from protocols.schemas import escape_pointer
from protocols.schemas import schema_errors as schema_errors


class Effect(StrEnum):
    READ = "read"
    EXTERNAL_WRITE = "external_write"
    FINANCIAL_WRITE = "financial_write"
    HUMAN = "human"


class Idempotency(StrEnum):
    """What a repeat of the same logical operation does at the destination
    (docs/design.md#retries)."""

    NONE = "none"
    RECEIVER_DEDUP = "receiver_dedup"
    IDEMPOTENT = "idempotent"


class Reconciliation(StrEnum):
    """What a destination's lookup may settle about an uncertain attempt
    (docs/design.md#reconciliation).

    - `none`: nothing; no lookup is made, and an admin resolves every unknown;
    - `presence`: a lookup that finds the effect proves it happened; not finding it proves
      nothing (a mail system: absence is no proof that nothing was sent);
    - `presence_and_absence`: the lookup is authoritative both ways, so an absence proves no
      effect: the operation may be retried with the same key where its retry rules allow, or
      renewed by a new approval.
    """

    NONE = "none"
    PRESENCE = "presence"
    PRESENCE_AND_ABSENCE = "presence_and_absence"

    def settles(self, found: str) -> bool:
        """May a lookup that answered `found` ("present", "absent", "unknown") be used?"""
        if found == "present":
            return self is not Reconciliation.NONE
        if found == "absent":
            return self is Reconciliation.PRESENCE_AND_ABSENCE
        return False


#: How much each reconciliation lets a lookup settle: a change up is breaking.
RECONCILIATION_REACH = {Reconciliation.NONE: 0, Reconciliation.PRESENCE: 1,
                        Reconciliation.PRESENCE_AND_ABSENCE: 2}


@dataclass(frozen=True)
class AuthorityRequirement:
    """Which grant key the arguments select, and where: a JSON pointer into resolved arguments.

    Resource arguments are resolved before selection, so `/draft/payload/from` reads the sender
    of the exact revision the proposal snapshots, never a client-supplied field.
    """

    key: str
    pointer: str


@dataclass(frozen=True)
class ApprovalRequirement:
    """Who approves and for how long: `quorum` distinct humans holding `role` must grant
    (docs/design.md#approval-policies; a deployment's `APPROVAL_RULES` may raise it)."""

    role: str
    expires_in: int  # seconds
    quorum: int = 1

    def __post_init__(self) -> None:
        quorum: object = self.quorum  # checked: callers may not be typed
        if isinstance(quorum, bool) or not isinstance(quorum, int) or not 1 <= quorum <= 10:
            raise ValueError(f"an approval quorum is 1 to 10 approvers, got {self.quorum!r}")

    def declaration(self) -> dict[str, Any]:
        # The quorum is declared only where it is not 1, so that a contract without one keeps
        # the fingerprint it had before quorums existed.
        return {"role": self.role, "expires_in": self.expires_in,
                **({"quorum": self.quorum} if self.quorum != 1 else {})}


@dataclass(frozen=True)
class SchedulingContract:
    timeout: float = 15.0  # seconds a claimed attempt may run before it is presumed lost
    max_attempts: int = 1
    budget_cost: int = 1
    # The backoff between retries under the same key (`protocols.backoff`): its base delay and
    # its cap, in seconds; None: the deployment's (`RETRY_BACKOFF_SECONDS`,
    # `RETRY_BACKOFF_MAX_SECONDS`). Part of the fingerprint only when set.
    retry_base_delay: float | None = None
    retry_max_delay: float | None = None


class EvidenceRole(StrEnum):
    """The evidence record the dispatcher itself writes when an operation of the contract
    completes, in the outcome's transaction (docs/design.md#evidence): never an agent, a model or an
    API.

    - `receipt`: an evidence receipt over the exact bytes the handler retrieved;
    - `attestation`: the judgement of the validator serving the named policy on the exact
      report revision; a `pass` moves that revision to `attested`;
    - `publication`: the report's question is answered.
    """

    RECEIPT = "receipt"
    ATTESTATION = "attestation"
    PUBLICATION = "publication"


@dataclass(frozen=True)
class AttestationRequirement:
    """An operation that may run only on an attested report (docs/design.md#evidence): argument
    `argument` names an attestation (`att_…`) that must have passed, under `policy`, the exact
    revision the resource argument `report` references."""

    argument: str
    report: str
    policy: str


@dataclass(frozen=True)
class ResourceKind:
    """A kind of resource operations act on (docs/design.md#resources), declared whole by the
    extension that registers it: its name, the finite protocol its revisions move through (a table
    of the same name, registered with it: `protocols.lifecycle.resource_protocol_register`) and the
    JSON schema of a revision's payload.

    `links` maps a payload member holding another resource's id to that resource's kind (a
    report's `question`): admission resolves it through the store too, so an authority key can
    live one resource away (`/report/links/question/payload/topic`)."""

    name: str
    protocol: ResourceProtocol
    payload_schema: Mapping[str, Any]
    links: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class OperationContract:
    """All fields of docs/design.md#contracts. Instances are immutable; `fingerprint` pins every
    field."""

    qualified_name: str
    contract_version: int
    implementation_fingerprint: str
    input_type: Mapping[str, Any]
    output_type: Mapping[str, Any]
    authority_requirements: tuple[AuthorityRequirement, ...]
    possible_effects: frozenset[Effect]
    # argument name -> resource protocol name the argument must reference
    protocol_preconditions: Mapping[str, str] = field(default_factory=dict)
    # operation outcome -> resource state it leaves the referenced resources in
    protocol_outcomes: Mapping[str, str] = field(default_factory=dict)
    approval_requirement: ApprovalRequirement | None = None
    idempotency_contract: Idempotency = Idempotency.NONE
    scheduling_contract: SchedulingContract = SchedulingContract()
    destination: str = ""
    # argument name -> named pure normalizer applied after schema validation
    normalizers: Mapping[str, str] = field(default_factory=dict)
    # what the handler's lookup may settle after an uncertain attempt
    # (docs/design.md#reconciliation)
    reconciliation: Reconciliation = Reconciliation.NONE
    # The evidence chain (docs/design.md#evidence). Resource arguments the operation only reads:
    # resolved through the store and bound like any other, but never moved by a proposal, decision,
    # claim or outcome.
    reads: frozenset[str] = frozenset()
    evidence: EvidenceRole | None = None
    attestation: AttestationRequirement | None = None
    # The shareable read grant (docs/design.md#budgets): concurrent workflow branches
    # (and a parallel loop's iterations) may each pass one handle as a `reads` argument of this
    # operation. Only a pure read declares it (`_check_shareable`).
    shareable: bool = False

    def __post_init__(self) -> None:
        _check_shareable(self)
        for name in self.reads:
            if name not in self.protocol_preconditions:
                raise ValueError(f"{self.qualified_name}: read argument {name!r} is not a "
                                 "resource argument (protocol_preconditions)")
        need = self.attestation
        if need is not None and need.report not in self.protocol_preconditions:
            raise ValueError(f"{self.qualified_name}: the attested argument {need.report!r} "
                             "is not a resource argument (protocol_preconditions)")
        if Effect.FINANCIAL_WRITE in self.possible_effects and (
            Effect.EXTERNAL_WRITE not in self.possible_effects
        ):
            raise ValueError("a financial_write contract must also declare external_write "
                             "(docs/design.md#contracts)")
        for name in self.normalizers.values():
            if name not in NORMALIZERS:
                raise ValueError(f"unknown normalizer {name!r}")

    def declaration(self) -> dict[str, Any]:
        """The canonical declaration that the fingerprint digests."""
        return {
            "qualified_name": self.qualified_name,
            "contract_version": self.contract_version,
            "implementation_fingerprint": self.implementation_fingerprint,
            "input_type": dict(self.input_type),
            "output_type": dict(self.output_type),
            "authority_requirements": [
                {"key": r.key, "pointer": r.pointer} for r in self.authority_requirements
            ],
            "possible_effects": sorted(e.value for e in self.possible_effects),
            "protocol_preconditions": dict(self.protocol_preconditions),
            "protocol_outcomes": dict(self.protocol_outcomes),
            "approval_requirement": None if self.approval_requirement is None
            else self.approval_requirement.declaration(),
            "idempotency_contract": self.idempotency_contract.value,
            "scheduling_contract": {
                "timeout": self.scheduling_contract.timeout,
                "max_attempts": self.scheduling_contract.max_attempts,
                "budget_cost": self.scheduling_contract.budget_cost,
                **{name: getattr(self.scheduling_contract, name)
                   for name in ("retry_base_delay", "retry_max_delay")
                   if getattr(self.scheduling_contract, name) is not None},
            },
            "destination": self.destination,
            "normalizers": dict(self.normalizers),
            "reconciliation": self.reconciliation.value,
            "protocols": protocol_tables(self.protocol_preconditions.values()),
            # The evidence chain's fields are declared only where set, so that a contract without
            # them keeps the fingerprint it had before they existed.
            **({"reads": sorted(self.reads)} if self.reads else {}),
            **({"evidence": self.evidence.value} if self.evidence else {}),
            **({"attestation": {"argument": self.attestation.argument,
                                "report": self.attestation.report,
                                "policy": self.attestation.policy}}
               if self.attestation else {}),
            # Declared only where granted: a contract without the grant keeps its fingerprint,
            # and granting or withdrawing it changes the fingerprint (and so the checked one).
            **({"shareable": True} if self.shareable else {}),
        }

    @cached_property
    def fingerprint(self) -> str:
        return digest(self.declaration())

    @property
    def requires_approval(self) -> bool:
        return self.approval_requirement is not None

    @property
    def retry_safe(self) -> bool:
        """May an uncertain attempt be repeated with the same key? (docs/design.md#retries)."""
        return self.idempotency_contract in (Idempotency.RECEIVER_DEDUP, Idempotency.IDEMPOTENT)

    @cached_property
    def _validator(self) -> Any:
        return compile_schema(self.input_type)

    def schema_errors(self, arguments: Any, *, root: str = "/arguments") -> list[dict[str, str]]:
        """Schema violations of `arguments`, pointers from the request body's root."""
        return schema_errors(self._validator, arguments, root=root)

    def compile_schemas(self) -> None:
        """Compile the input and output schemas now (a `SchemaError` if either is invalid),
        so that none is compiled for the first time after an effect."""
        _ = self._validator, self._output_validator

    @cached_property
    def _output_validator(self) -> Any:
        return compile_schema(self.output_type)

    def output_errors(self, result: Any) -> list[dict[str, str]]:
        """Violations of the contract's `output_type` by a handler's result
        (docs/design.md#dispatcher step 9), pointers from `/result`. A result is a JSON object,
        whatever the schema allows."""
        if not isinstance(result, dict):
            return [{"pointer": "/result",
                     "message": f"is a {type(result).__name__}, not a JSON object"}]
        return schema_errors(self._output_validator, result, root="/result")

    def normalize(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Apply the contract's named normalizers; refusals are `schema_invalid`."""
        result = dict(arguments)
        problems: list[dict[str, str]] = []
        for name, normalizer in sorted(self.normalizers.items()):
            try:
                result[name] = NORMALIZERS[normalizer](result[name], result)
            except ValueError as exc:
                problems.append({"pointer": f"/arguments/{escape_pointer(name)}",
                                 "message": str(exc)})
        if problems:
            raise Denial(DenialCode.SCHEMA_INVALID, errors=problems)
        return result


def _check_shareable(contract: OperationContract) -> None:
    """Only a read may grant shared use of the resources it reads: no write, no human step, no
    approval, no outcome moving a resource, and at least one `reads` argument to share."""
    if not contract.shareable:
        return
    name = contract.qualified_name
    if contract.possible_effects != {Effect.READ}:
        effects = ", ".join(sorted(e.value for e in contract.possible_effects)) or "none"
        raise ValueError(f"{name}: only a read contract (possible_effects exactly {{read}}) may "
                         f"declare shareable; it declares {{{effects}}}")
    if contract.approval_requirement is not None or contract.protocol_outcomes:
        raise ValueError(f"{name}: a shareable read needs no approval and moves no resource "
                         "(approval_requirement and protocol_outcomes must be empty)")
    if not contract.reads:
        raise ValueError(f"{name}: shareable names nothing to share: the contract reads no "
                         "resource argument (`reads`)")


class ContractConflictError(ValueError):
    """A second registration of a name and version with a different fingerprint."""

    def __init__(self, name: str, version: int, differences: list[str]) -> None:
        self.differences = differences
        super().__init__(
            f"{name} v{version} is already registered with another fingerprint; "
            f"differs in: {', '.join(differences)}"
        )


class ContractRegistry:
    """Versioned trusted contracts. Registration is idempotent for an identical contract."""

    def __init__(self) -> None:
        self._contracts: dict[tuple[str, int], OperationContract] = {}

    def register(self, contract: OperationContract) -> OperationContract:
        key = (contract.qualified_name, contract.contract_version)
        existing = self._contracts.get(key)
        if existing is None:
            self._contracts[key] = contract
            return contract
        if existing.fingerprint != contract.fingerprint:
            old, new = existing.declaration(), contract.declaration()
            raise ContractConflictError(
                contract.qualified_name,
                contract.contract_version,
                sorted(k for k in old if old[k] != new[k]),
            )
        return existing

    def resolve(self, name: str, version: int | None = None) -> OperationContract:
        """The contract of that name (newest version unless one is named); else unknown."""
        versions = [v for (n, v) in self._contracts if n == name]
        if version is None and versions:
            version = max(versions)
        contract = self._contracts.get((name, version)) if version is not None else None
        if contract is None:
            raise Denial(DenialCode.UNKNOWN_OPERATION, operation=name)
        return contract

    def by_fingerprint(self, fingerprint: str) -> OperationContract | None:
        for contract in self._contracts.values():
            if contract.fingerprint == fingerprint:
                return contract
        return None

    def __iter__(self) -> Iterator[OperationContract]:
        return iter(sorted(self._contracts.values(),
                           key=lambda c: (c.qualified_name, c.contract_version)))

    def __len__(self) -> int:
        return len(self._contracts)
