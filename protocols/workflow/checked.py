"""`CheckedWorkflow`: the checker's certificate, with a private constructor
(docs/design.md#extensions).

Only `check_workflow` holds the issuing token, so code elsewhere cannot construct, copy, pickle or
mutate a `CheckedWorkflow` into existence. The certificate records the fingerprint of every
contract it was checked against: `binds(registry)` tells a runtime whether it still describes
the registered contracts. It is not authorization: the dispatcher still checks grants, approvals
and states at run time (docs/design.md#dispatcher, #extensions).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NoReturn

from protocols.contracts import ContractRegistry
from protocols.workflow.ir import Workflow


class _IssuerToken:
    __slots__ = ()


_ISSUER = _IssuerToken()


class CheckedWorkflow:
    """A workflow that passed `check_workflow`, with its effects ε and contract fingerprints."""

    __slots__ = ("_contracts", "_effects", "_workflow")

    _workflow: Workflow
    _effects: frozenset[str]
    _contracts: Mapping[str, str]

    def __init__(self, token: object, workflow: Workflow, effects: frozenset[str],
                 contracts: Mapping[str, str]) -> None:
        if token is not _ISSUER:
            raise TypeError("a CheckedWorkflow is issued only by check_workflow")
        object.__setattr__(self, "_workflow", workflow)
        object.__setattr__(self, "_effects", frozenset(effects))
        object.__setattr__(self, "_contracts", MappingProxyType(dict(contracts)))

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("a CheckedWorkflow is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("a CheckedWorkflow is immutable")

    def __reduce__(self) -> NoReturn:
        raise TypeError("a CheckedWorkflow cannot be copied or serialized; check the workflow")

    def __repr__(self) -> str:
        return (f"CheckedWorkflow({self._workflow.name!r}, effects={sorted(self._effects)}, "
                f"contracts={sorted(self._contracts)})")

    @property
    def workflow(self) -> Workflow:
        return self._workflow

    @property
    def effects(self) -> frozenset[str]:
        """ε: the upper bound on the effects any run may have (docs/workflows.md#typing-rules)."""
        return self._effects

    @property
    def contracts(self) -> Mapping[str, str]:
        """Qualified operation name -> fingerprint of the contract it was checked against."""
        return self._contracts

    def binds(self, registry: ContractRegistry) -> bool:
        """Whether every contract checked against is still the one `registry` resolves."""
        for name, fingerprint in self._contracts.items():
            if registry.by_fingerprint(fingerprint) is None:
                return False
            if registry.resolve(name).fingerprint != fingerprint:
                return False
        return True


def _issue(workflow: Workflow, effects: frozenset[str],
          contracts: Mapping[str, str]) -> CheckedWorkflow:
    """For `check_workflow` only: the one place that holds the token."""
    return CheckedWorkflow(_ISSUER, workflow, effects, contracts)
