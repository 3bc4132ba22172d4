"""The process-wide runtime: contract registry, handlers and deployment policy.

Contracts are registered together with their handlers, whose implementation fingerprints are
part of each contract's fingerprint (spec §4.2). Built once per process, lazily.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from dispatch.contracts import build_registry
from dispatch.handlers import HANDLERS, Handler
from protocols.canonical import digest
from protocols.contracts import ContractRegistry, OperationContract
from protocols.denials import Denial, DenialCode
from protocols.grants import Policy


@dataclass(frozen=True)
class Runtime:
    registry: ContractRegistry
    handlers: dict[str, Handler]
    policy: Policy

    def register(self, contract: OperationContract, handler: Handler) -> OperationContract:
        """Register a trusted contract with its handler (embedding API, spec §10).

        The handler's implementation fingerprint must be the contract's; a second
        registration of a name and version with another fingerprint is refused.
        """
        if handler.name != contract.qualified_name:
            raise ValueError(f"handler {handler.name!r} cannot serve {contract.qualified_name!r}")
        if handler.implementation_fingerprint != contract.implementation_fingerprint:
            raise ValueError(f"{contract.qualified_name}: the handler's implementation "
                             "fingerprint differs from the contract's")
        registered = self.registry.register(contract)
        self.handlers[contract.qualified_name] = handler
        return registered

    def contract(self, name: object) -> OperationContract:
        if not isinstance(name, str):
            raise Denial(DenialCode.UNKNOWN_OPERATION, operation=str(name))
        return self.registry.resolve(name)

    def handler(self, contract: OperationContract) -> Handler:
        handler = self.handlers[contract.qualified_name]
        # A handler whose fingerprint differs from the contract's cannot stand in for it.
        if handler.implementation_fingerprint != contract.implementation_fingerprint:
            raise Denial(DenialCode.CONTRACT_MISMATCH, operation=contract.qualified_name)
        return handler

    def destination(self, contract: OperationContract) -> dict[str, Any]:
        return self.handlers[contract.qualified_name].destination()

    def destination_fingerprint(self, contract: OperationContract) -> str:
        return digest(self.destination(contract))

    def policy_fingerprint(self, contract: OperationContract) -> str:
        return digest({
            "allowed_effects": sorted(self.policy.allowed_effects),
            "denied_operations": sorted(self.policy.denied_operations),
            "approval": contract.declaration()["approval_requirement"],
            "redact": sorted(settings.AUDIT_REDACT_FIELDS),
        })


@functools.cache
def get_runtime() -> Runtime:
    handlers = dict(HANDLERS)
    registry = build_registry({name: h.implementation_fingerprint for name, h in handlers.items()})
    policy = Policy(allowed_effects=frozenset(settings.DEPLOYMENT_ALLOWED_EFFECTS))
    runtime = Runtime(registry=registry, handlers=handlers, policy=policy)
    # Extensions register their contracts and handlers in every process (web and worker).
    for dotted in settings.DISPATCH_EXTENSIONS:
        importlib.import_module(dotted).register(runtime)
    return runtime
