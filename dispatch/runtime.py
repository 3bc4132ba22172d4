"""The process-wide runtime: contracts, handlers, resource kinds, validators, deployment policy.

The runtime ships no contract, handler, resource kind or validator of its own: extensions add
them. Each module named in `settings.DISPATCH_EXTENSIONS` declares the extension API version it
implements (`EXTENSION_API = 1`) and has a `register(runtime)` function that calls
`runtime.register(contract, handler)`, `runtime.register_resource_kind(kind)` and
`runtime.register_validator(name, version, policy, fn)`; every process (web and worker) builds
the runtime the same way, once, lazily. A module without the version, or with one this runtime
does not support, is refused before its `register` runs (docs/design.md#extensions: extension
contracts are versioned; docs/compatibility.md says what version 1 promises). A contract is
registered together with its handler, whose implementation fingerprint is part of the contract's
fingerprint (docs/design.md#contracts). A validator decides what may be published
(docs/design.md#evidence), so a deployment trusts one by loading the extension that registers it,
never by default.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Final

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from dispatch.handlers import Handler
from dispatch.hooks import AdmissionCheck, OutcomeHook
from dispatch.http_actions import actions_register
from dispatch.presentation import MessagePresentation, Summarizer
from protocols.approval_rules import (
    ApprovalRule,
    amount_raises_quorum,
    quorum_for,
    rules_for,
    rules_parse,
    rules_problems,
)
from protocols.canonical import digest
from protocols.contracts import ContractRegistry, OperationContract, ResourceKind, compile_schema
from protocols.denials import Denial, DenialCode
from protocols.evidence import Validator, ValidatorRegistry, ValidatorSpec
from protocols.grants import Policy
from protocols.jsontypes import JSONObject
from protocols.lifecycle import (
    RESOURCE_PROTOCOLS,
    OperationEvent,
    OperationState,
    ProtocolTableError,
    ResourceEvent,
    ResourceProtocol,
    outcome_events,
    resource_protocol_register,
)
from protocols.tool_names import GATEWAY_TOOLS, tool_name, tool_name_problem

#: The extension API this runtime implements: what `register(runtime)` may call and what a
#: handler is handed (docs/compatibility.md). An extension declares it as `EXTENSION_API`.
EXTENSION_API_VERSION: Final = 1


@dataclass(frozen=True)
class Runtime:
    registry: ContractRegistry
    # keyed by name and version: registering v2 never replaces the handler a pending v1
    # proposal will run with (docs/design.md#extensions)
    handlers: dict[tuple[str, int], Handler]
    policy: Policy
    resource_kinds: dict[str, ResourceKind] = field(default_factory=dict)
    validators: ValidatorRegistry = field(default_factory=ValidatorRegistry)
    # contract fingerprint -> what each operation move does to its resources, read once from
    # the contract's `protocol_outcomes` at registration (`resource_event`)
    outcome_moves: dict[str, dict[OperationState, ResourceEvent]] = field(default_factory=dict)
    # keyed like the handlers: what the extension registered with each contract
    # (`dispatch.hooks`)
    outcome_hooks: dict[tuple[str, int], OutcomeHook] = field(default_factory=dict)
    admission_checks: dict[tuple[str, int], tuple[AdmissionCheck, ...]] = field(
        default_factory=dict)
    # what the console reads (`dispatch.presentation`): each contract's one-sentence summary,
    # keyed like the handlers, and how each resource kind's payload reads
    summaries: dict[tuple[str, int], Summarizer] = field(default_factory=dict)
    presentations: dict[str, MessagePresentation] = field(default_factory=dict)
    # how an admin checks at the destination whether an operation's effect happened, keyed
    # like the handlers (`how_to_check`)
    checks: dict[tuple[str, int], str] = field(default_factory=dict)
    # tool name (docs/mcp.md#names) -> the qualified name it stands for: one-to-one, the
    # gateway's own tools taken first
    tool_names: dict[str, str] = field(default_factory=lambda: {
        tool_name(name): name for name in GATEWAY_TOOLS})
    # id(contract) -> (the contract, the policy, the redacted fields, its policy fingerprint)
    _policy_fingerprints: dict[int, tuple[OperationContract, Policy, tuple[str, ...], str]] = \
        field(default_factory=dict, init=False, repr=False, compare=False)

    def register(self, contract: OperationContract, handler: Handler, *,
                 on_outcome: OutcomeHook | None = None,
                 admission: tuple[AdmissionCheck, ...] = (),
                 summary: Summarizer | None = None,
                 how_to_check: str = "") -> OperationContract:
        """Register a trusted contract with its handler (embedding API, docs/design.md#extensions),
        and what its extension adds to it (`dispatch.hooks`): `on_outcome`, run inside each
        outcome's transaction, and `admission`, the checks every stage runs before it acts; and
        `summary`, the sentence the console puts on top of its approvals
        (`dispatch.presentation`), never part of its fingerprint; and `how_to_check`, the words
        that tell an admin resolving an unknown outcome how to look at the destination
        (`{key}` in them stands for the operation id, the destination's idempotency key).

        The handler's implementation fingerprint must be the contract's; a second
        registration of a name and version with another fingerprint is refused. A contract
        that declares an evidence role needs its outcome hook, and one that declares an
        attestation requirement an admission check: never a declaration nothing enforces.
        """
        name = contract.qualified_name
        if contract.evidence is not None and on_outcome is None:
            raise ValueError(f"{name}: it declares evidence {contract.evidence.value!r}, but "
                             "no outcome hook issues it")
        if contract.attestation is not None and not admission:
            raise ValueError(f"{name}: it declares an attestation requirement, but no "
                             "admission check enforces it")
        if handler.name != contract.qualified_name:
            raise ValueError(f"handler {handler.name!r} cannot serve {contract.qualified_name!r}")
        if handler.implementation_fingerprint != contract.implementation_fingerprint:
            raise ValueError(f"{contract.qualified_name}: the handler's implementation "
                             "fingerprint differs from the contract's")
        contract.compile_schemas()  # or registration fails: never after an effect
        # Its fingerprint pins each resource argument's table: never one not registered yet.
        unregistered = sorted(set(contract.protocol_preconditions.values())
                              - set(RESOURCE_PROTOCOLS))
        if unregistered:
            raise ValueError(f"{name}: no resource kind is registered as {unregistered}; "
                             "register its kinds before it")
        moves = _outcome_moves(contract)  # or registration fails: never at an outcome
        problem = tool_name_problem(name, self.tool_names)
        if problem is not None:  # a model could not call it, or would call another by it
            raise ValueError(problem)
        registered = self.registry.register(contract)
        self.outcome_moves[registered.fingerprint] = moves
        self.tool_names[tool_name(name)] = name
        key = (contract.qualified_name, contract.contract_version)
        self.handlers[key] = handler
        if on_outcome is not None:
            self.outcome_hooks[key] = on_outcome
        if admission:
            self.admission_checks[key] = admission
        if summary is not None:
            self.summaries[key] = summary
        if how_to_check:
            self.checks[key] = how_to_check
        return registered

    def how_to_check(self, contract: OperationContract, operation_id: str) -> str:
        """How to check the destination for this operation's effect, as the extension
        registered it with the contract ("" if it said nothing)."""
        text = self.checks.get((contract.qualified_name, contract.contract_version), "")
        return text.replace("{key}", operation_id)

    def resource_event(self, fingerprint: str, moved: OperationState,
                       event: OperationEvent) -> ResourceEvent:
        """The event that moves an operation's resources with its move to `moved`, as its
        contract declares (`protocol_outcomes`). A contract no longer registered is settled by
        the event its tables share with the operation's own (`event`), by name."""
        moves = self.outcome_moves.get(fingerprint)
        if moves is None:
            return ResourceEvent(event.value)
        return moves[moved]

    def register_resource_kind(
        self, kind: ResourceKind, *, presentation: MessagePresentation | None = None,
    ) -> ResourceKind:
        """Register a kind of resource that agents may create and operations may act on,
        declared whole by its extension: name, protocol table, payload schema, links; and, for
        the console only, how its payload reads (`presentation`, `dispatch.presentation`).

        Refused (`ValueError`, saying what) unless its table is named for the kind and holds
        together (`protocols.lifecycle.protocol_problems`: every state reachable, final states
        final, every transition with a target), each state fits the store's column, its payload
        schema compiles (else `SchemaError`) and each link names a kind registered before it.
        The table is registered with it (`resource_protocol_register`): the store, admission
        and the checkers read it there. A second registration of a name with another kind or
        table is refused.
        """
        if kind.protocol.name != kind.name:
            raise ProtocolTableError(f"resource kind {kind.name!r}: its protocol is named "
                                     f"{kind.protocol.name!r}, not after the kind")
        for member, linked in sorted(kind.links.items()):
            if linked not in self.resource_kinds:
                raise ValueError(f"resource kind {kind.name!r}: link {member!r} names "
                                 f"{linked!r}, no kind registered before it")
        compile_schema(kind.payload_schema)  # or registration fails: never at a create
        from dispatch.models import Resource  # the runtime is built once the apps are ready

        limit = Resource._meta.get_field("state").max_length or 0
        # str(): a table with a state that is no string is refused, saying so, just below
        too_long = sorted(str(state) for state in kind.protocol.states
                          if len(str(state)) > limit)
        if too_long:
            raise ProtocolTableError(f"resource protocol {kind.name!r}: states longer than the "
                                     f"store's {limit} characters: {too_long}")
        resource_protocol_register(kind.protocol)
        existing = self.resource_kinds.setdefault(kind.name, kind)
        if existing != kind:
            raise ValueError(f"resource kind {kind.name!r} is already registered otherwise")
        if presentation is not None:
            self.presentations[kind.name] = presentation
        return existing

    def register_validator(self, name: str, version: int, policy: str,
                           fn: Validator) -> ValidatorSpec:
        """Register a trusted validator `name@version` judging reports under `policy`
        (docs/design.md#evidence): `evidence.attest` runs the newest version serving the policy it
        names. The same `name@version` with another function or policy, or a policy already served
        by another name, is `ValidatorConflictError` (`protocols.evidence.ValidatorRegistry`)."""
        return self.validators.register(
            ValidatorSpec(name=name, version=version, policy=policy, fn=fn))

    @property
    def resource_protocols(self) -> dict[str, ResourceProtocol]:
        """Each registered resource kind's table, by kind: what the workflow checker reads
        (`protocols.workflow.check_workflow(kinds=...)`)."""
        return {name: kind.protocol for name, kind in self.resource_kinds.items()}

    def operation_of_tool(self, name: str) -> str:
        """The qualified name a tool name stands for (`email_send` -> `email.send`); a name
        that is no tool's (a qualified name among them) is returned as it is."""
        return self.tool_names.get(name, name)

    def contract(self, name: object) -> OperationContract:
        if not isinstance(name, str):
            raise Denial(DenialCode.UNKNOWN_OPERATION, operation=str(name))
        return self.registry.resolve(name)

    def contract_for(self, name: object, fingerprint: str) -> OperationContract:
        """The contract a proposal was made under: the registered one with its fingerprint,
        whatever newer version of the name exists; else the newest of the name (whose
        fingerprint differs: the caller refuses `contract_mismatch`), or `unknown_operation`."""
        found = self.registry.by_fingerprint(fingerprint)
        if found is not None and found.qualified_name == name:
            return found
        return self.contract(name)

    def require_operations(self, names: Iterable[str]) -> list[str]:
        """The names, sorted and distinct, each that of a registered contract; a name no
        contract has (a typo would be a dead tool or grant) is `unknown_operation`."""
        wanted = sorted(set(names))
        for name in wanted:
            self.registry.resolve(name)
        return wanted

    def handler(self, contract: OperationContract) -> Handler:
        """The handler registered with this contract's name and version."""
        handler = self.handlers[(contract.qualified_name, contract.contract_version)]
        # A handler whose fingerprint differs from the contract's cannot stand in for it.
        if handler.implementation_fingerprint != contract.implementation_fingerprint:
            raise Denial(DenialCode.CONTRACT_MISMATCH, operation=contract.qualified_name)
        return handler

    def destination(self, contract: OperationContract) -> JSONObject:
        return self.handler(contract).destination()

    def destination_fingerprint(self, contract: OperationContract) -> str:
        # Computed once per destination (docs/design.md#dispatcher), keyed by its value: a
        # destination the deployment changes is a new fingerprint at once.
        return _fingerprint(_frozen(self.destination(contract)))

    def approval_quorum(self, contract: OperationContract, arguments: JSONObject) -> int:
        """How many distinct humans must grant `contract` on the snapshot's `arguments`: the
        contract's quorum, raised by the deployment's applicable rules (never lowered)."""
        requirement = contract.approval_requirement
        base = 1 if requirement is None else requirement.quorum
        return quorum_for(base, self.policy.approval_rules, contract.qualified_name, arguments)

    def large_amount(self, operation: str, arguments: JSONObject) -> bool:
        """Whether the amount the action moves raises its quorum under the deployment's rules
        (the console's "large amount": the same rules, currency by currency)."""
        return amount_raises_quorum(self.policy.approval_rules, operation, arguments)

    def policy_fingerprint(self, contract: OperationContract) -> str:
        """Computed once per contract and deployment policy (docs/design.md#dispatcher): every
        claim asks it twice (the dispatch's re-check and the worker's), so the answer is kept
        while the contract, the policy and the redacted fields are the same objects and values."""
        redact = tuple(settings.AUDIT_REDACT_FIELDS)
        kept = self._policy_fingerprints.get(id(contract))
        if kept is not None and kept[0] is contract and kept[1] is self.policy \
                and kept[2] == redact:
            return kept[3]
        found = self._policy_fingerprint(contract)
        self._policy_fingerprints[id(contract)] = (contract, self.policy, redact, found)
        return found

    def _policy_fingerprint(self, contract: OperationContract) -> str:
        rules = rules_for(self.policy.approval_rules, contract.qualified_name)
        return _fingerprint(_frozen({
            "allowed_effects": sorted(self.policy.allowed_effects),
            "denied_operations": sorted(self.policy.denied_operations),
            "approval": contract.declaration()["approval_requirement"],
            "redact": sorted(settings.AUDIT_REDACT_FIELDS),
            # Declared only where a rule names the operation, so that a contract without one
            # keeps the fingerprint it had before rules existed.
            **({"rules": [rule.declaration() for rule in rules]} if rules else {}),
        }))


def _outcome_moves(contract: OperationContract) -> dict[OperationState, ResourceEvent]:
    """What each outcome does to the resources `contract` moves, from its `protocol_outcomes`
    checked against each resource's table; ValueError if it names a state or a move a table
    lacks, leaves a required outcome out, or declares outcomes for no resource at all."""
    moved = {arg: name for arg, name in contract.protocol_preconditions.items()
             if arg not in contract.reads}
    name = contract.qualified_name
    if not moved:
        if contract.protocol_outcomes:
            raise ValueError(f"{name}: protocol_outcomes declared, but it moves no resource")
        return {}
    found: dict[OperationState, ResourceEvent] | None = None
    for arg, protocol_name in sorted(moved.items()):
        protocol = RESOURCE_PROTOCOLS.get(protocol_name)
        if protocol is None:
            raise ValueError(f"{name}: argument {arg!r} names no resource protocol "
                             f"{protocol_name!r}")
        try:
            events = outcome_events(protocol, contract.protocol_outcomes)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
        if found is not None and events != found:
            raise ValueError(f"{name}: its resources would move by different events on one "
                             "outcome")
        found = events
    assert found is not None
    return found


def _frozen(value: Any) -> Any:
    """A hashable image of a JSON value (dicts as sorted item tuples), to key the cache."""
    if isinstance(value, dict):
        return ("{}", tuple(sorted((k, _frozen(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return ("[]", tuple(_frozen(v) for v in value))
    return value


def _thawed(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) == 2 and value[0] in ("{}", "[]"):
        if value[0] == "{}":
            return {k: _thawed(v) for k, v in value[1]}
        return [_thawed(v) for v in value[1]]
    return value


@functools.lru_cache(maxsize=256)
def _fingerprint(frozen: Any) -> str:
    return digest(_thawed(frozen))


@functools.cache
def get_runtime() -> Runtime:
    """The runtime, built once per process: the extensions' contracts, then the HTTP actions of
    `ACTIONS_DIR` (an invalid file refuses it, `dispatch.http_actions.ActionsError`). Its
    approval rules are checked against the
    contracts its extensions registered: a rule that would never apply as written refuses it
    (`ApprovalRulesError`), so that no process runs on it (`config.wsgi`, `config.asgi` and the
    Celery worker build it as they start; `manage.py check` reports it, `dispatch.E010`)."""
    policy = Policy(allowed_effects=frozenset(settings.DEPLOYMENT_ALLOWED_EFFECTS),
                    approval_rules=approval_rules_setting())
    runtime = Runtime(registry=ContractRegistry(), handlers={}, policy=policy)
    # Extensions register their contracts, handlers and resource kinds in every process.
    for dotted in settings.DISPATCH_EXTENSIONS:
        extension_load(dotted).register(runtime)
    # HTTP actions (docs/actions.md): each file of ACTIONS_DIR, or no runtime at all
    # (`ActionsError`, naming each file, line and key).
    actions_register(runtime)
    inputs: dict[str, list[Mapping[str, Any]]] = {}
    for contract in runtime.registry:
        inputs.setdefault(contract.qualified_name, []).append(contract.input_type)
    problems = rules_problems(policy.approval_rules, inputs)
    if problems:
        raise ApprovalRulesError(problems)
    return runtime


class ApprovalRulesError(ImproperlyConfigured):
    """`APPROVAL_RULES` holds rules that would never apply as written: each problem names its
    rule by position and operation."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def approval_rules_setting() -> tuple[ApprovalRule, ...]:
    """`settings.APPROVAL_RULES`, parsed; `ApprovalRulesError` naming the first thing wrong.
    Their spend caps are charged by the claim (`dispatch.services.caps`)."""
    try:
        return rules_parse(settings.APPROVAL_RULES)
    except ValueError as error:
        raise ApprovalRulesError([_with_operation(str(error))]) from None


def _with_operation(problem: str) -> str:
    """`APPROVAL_RULES[i]…: why` as `APPROVAL_RULES[i] (operation)…: why`, where the rule names
    its operation."""
    raw = settings.APPROVAL_RULES
    match = re.match(r"APPROVAL_RULES\[(\d+)\]", problem)
    if match is None or not isinstance(raw, list):
        return problem
    rule = raw[int(match.group(1))]
    name = rule.get("operation") if isinstance(rule, dict) else None
    if not isinstance(name, str):
        return problem
    return f"{match.group(0)} ({name}){problem[match.end():]}"


def extension_load(dotted: str) -> ModuleType:
    """Import the extension module `dotted`, refusing it unless it declares the extension API
    version this runtime supports (`ImproperlyConfigured`, naming the module and both
    versions). A bool is not a version, though `True == 1`."""
    module = importlib.import_module(dotted)
    if not hasattr(module, "EXTENSION_API"):
        raise ImproperlyConfigured(
            f"extension {dotted!r} declares no EXTENSION_API; this runtime supports extension "
            f"API version {EXTENSION_API_VERSION}: add `EXTENSION_API = "
            f"{EXTENSION_API_VERSION}` to the module once it implements that version")
    declared = module.EXTENSION_API
    if type(declared) is not int or declared != EXTENSION_API_VERSION:
        raise ImproperlyConfigured(
            f"extension {dotted!r} declares EXTENSION_API = {declared!r}; this runtime supports "
            f"extension API version {EXTENSION_API_VERSION} only: use a release of the "
            "extension written for it, or a runtime that supports its version")
    return module
