"""Operation contracts, their fingerprints and the contract registry
(docs/design.md#contracts, #extensions).

A contract is a trusted declaration about a host implementation. Its fingerprint is the digest of
its canonical encoding, which includes the handler's implementation fingerprint, so a handler
whose contract differs cannot silently replace a checked one, and a proposal made under one
fingerprint cannot dispatch under another.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

import jsonschema
import referencing
from jsonschema.exceptions import FormatError, SchemaError, ValidationError

from protocols.addresses import AddressError, is_mailbox
from protocols.canonical import digest
from protocols.denials import ELLIPSIS, Denial, DenialCode
from protocols.lifecycle import ResourceProtocol, protocol_tables
from protocols.normalizers import NORMALIZERS
from protocols.patterns import PatternError, compile_pattern


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
    role: str
    expires_in: int  # seconds


@dataclass(frozen=True)
class SchedulingContract:
    timeout: float = 15.0  # seconds a claimed attempt may run before it is presumed lost
    max_attempts: int = 1
    budget_cost: int = 1


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

    def __post_init__(self) -> None:
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
        approval = self.approval_requirement
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
            "approval_requirement": None if approval is None else {
                "role": approval.role, "expires_in": approval.expires_in},
            "idempotency_contract": self.idempotency_contract.value,
            "scheduling_contract": {
                "timeout": self.scheduling_contract.timeout,
                "max_attempts": self.scheduling_contract.max_attempts,
                "budget_cost": self.scheduling_contract.budget_cost,
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
                problems.append({"pointer": f"/arguments/{_escape(name)}", "message": str(exc)})
        if problems:
            raise Denial(DenialCode.SCHEMA_INVALID, errors=problems)
        return result


def compile_schema(schema: Mapping[str, Any]) -> Any:
    """A validator compiled once. An empty registry: a schema's $ref never fetches a URL.

    What a value must be is what the operator will read it as (docs/design.md#console):

    - `pattern` has its ECMA-262 meaning (`protocols.patterns`): `$` is the end of the text, so
      `^[A-Z]{3}$` refuses `"EUR\\n"`, and `\\d` is `[0-9]`. A pattern that cannot have that
      meaning is a `SchemaError` here, never a surprise at validation;
    - `format: "mailbox"` is one plain address (`protocols.addresses`), and so are `email` and
      `idn-email`, whose built-in check only looks for an `@`. A refusal says why.
    """
    base = jsonschema.validators.validator_for(schema)
    base.check_schema(schema)
    for pattern in _patterns(schema):
        try:
            compile_pattern(pattern)
        except PatternError as exc:
            raise SchemaError(str(exc)) from None
    cls = _strict(base)
    return cls(schema, registry=referencing.Registry(), format_checker=cls.FORMAT_CHECKER)


# Keywords whose values are data, not subschemas: a "pattern" member there is not a pattern.
_DATA_KEYWORDS = frozenset({"const", "default", "enum", "examples"})


def _patterns(schema: Any) -> list[str]:
    if isinstance(schema, list):
        return [p for item in schema for p in _patterns(item)]
    if not isinstance(schema, Mapping):
        return []
    found = [schema["pattern"]] if isinstance(schema.get("pattern"), str) else []
    for key, value in schema.items():
        if key not in _DATA_KEYWORDS:
            found.extend(_patterns(value))
    return found


def _pattern_keyword(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _search(pattern: str, instance: str) -> bool:
    try:
        return compile_pattern(pattern).search(instance) is not None
    except PatternError:
        return False  # unreachable after compile_schema's check; refuse rather than pass


def _format_keyword(validator: Any, fmt: str, instance: Any, schema: Any) -> Any:
    if validator.format_checker is None:
        return
    try:
        validator.format_checker.check(instance, fmt)
    except FormatError as error:
        reason = f": {error.cause}" if isinstance(error.cause, AddressError) else ""
        yield ValidationError(error.message + reason, cause=error.cause)


@functools.cache
def _strict(base: Any) -> Any:
    """`base` (a draft's validator class) with the pattern and format semantics above."""
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = {**base.FORMAT_CHECKER.checkers,
                        **dict.fromkeys(ADDRESS_FORMATS, (is_mailbox, AddressError))}
    return jsonschema.validators.extend(
        base, {"pattern": _pattern_keyword, "format": _format_keyword}, format_checker=checker)


ADDRESS_FORMATS = ("mailbox", "email", "idn-email")


def schema_errors(validator: Any, instance: Any, *, root: str) -> list[dict[str, str]]:
    """Violations as `{"pointer","message"}`, sorted; pointers start at `root`.

    A missing member is reported at its own place (`/arguments/to`), an extra one too.
    """
    errors: list[dict[str, str]] = []
    for error in validator.iter_errors(instance):
        base = root + "".join("/" + _escape(str(p)) for p in error.absolute_path)
        found = error.instance
        if error.validator == "required" and isinstance(found, dict):
            errors.extend(
                {"pointer": f"{base}/{_escape(name)}", "message": "is required"}
                for name in error.validator_value
                if name not in found
            )
        elif error.validator == "additionalProperties" and isinstance(found, dict):
            known = set(error.schema.get("properties", {}))
            errors.extend(
                {"pointer": f"{base}/{_escape(name)}", "message": "is not allowed"}
                for name in sorted(set(found) - known)
            )
        else:
            errors.append({"pointer": base, "message": _quoting_less(error.message, found)})
    # jsonschema reports `required` once per missing member, each time with the whole list.
    unique = {(e["pointer"], e["message"]): e for e in errors}
    return [unique[k] for k in sorted(unique)]


#: How much of a value an error message quotes (characters of its repr).
MAX_QUOTED = 64


def _quoting_less(message: str, instance: Any) -> str:
    """`message` with its quote of `instance` (jsonschema quotes the repr) cut to `MAX_QUOTED`
    characters and an ellipsis: `'xxxx…' is too long` says what the value began with and what
    is wrong with it, whatever its length."""
    shown = repr(instance)
    if len(shown) <= MAX_QUOTED or shown not in message:
        return message
    short = (repr(instance[:MAX_QUOTED - 3] + ELLIPSIS) if isinstance(instance, str)
             else shown[:MAX_QUOTED - 1] + ELLIPSIS)
    return message.replace(shown, short)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


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
