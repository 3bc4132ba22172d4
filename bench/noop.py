"""No-op contracts and their handler, registered in every bench process that measures actions.

Loaded as a dispatch extension (`DISPATCH_EXTENSIONS=bench.noop`, which `get_runtime()` imports
in every process), so the driver, its forked workers and a profiled process all see the same
registry. Two contracts, one handler class each, neither doing any I/O:

- `bench.noop`: shaped like `crm.lookup` (one string argument selected by the grant's scope),
  `Effect.READ`, idempotent, no approval: a dispatch claims it by locking the proposal row.
- `bench.noop_gated`: the same, with an operator's approval: a dispatch claims its permit.
"""

from __future__ import annotations

from typing import Any, ClassVar

from dispatch.handlers import FromCode, Handler, HandlerContext
from dispatch.runtime import Runtime
from protocols.contracts import (
    ApprovalRequirement,
    AuthorityRequirement,
    Effect,
    Idempotency,
    OperationContract,
    SchedulingContract,
)

NOOP = "bench.noop"
NOOP_GATED = "bench.noop_gated"
ARGUMENTS = {"key": "k-001"}
SCOPE = {"key": "*"}

#: The extension API version this module implements (dispatch.runtime.EXTENSION_API_VERSION).
EXTENSION_API = 1


class NoopHandler(Handler):
    name: ClassVar[str] = NOOP
    implementation_fingerprint = FromCode()

    def destination(self) -> dict[str, Any]:
        return {"name": "nowhere", "address": "in-process"}

    def perform(self, ctx: HandlerContext) -> dict[str, Any]:
        return {"ok": True}


class GatedNoopHandler(NoopHandler):
    name = NOOP_GATED


def _contract(handler: type[NoopHandler], approval: ApprovalRequirement | None
              ) -> OperationContract:
    return OperationContract(
        qualified_name=handler.name, contract_version=1,
        implementation_fingerprint=handler.implementation_fingerprint,
        input_type={"type": "object", "additionalProperties": False, "required": ["key"],
                    "properties": {"key": {"type": "string", "minLength": 1, "maxLength": 64}}},
        output_type={"type": "object"},
        authority_requirements=(AuthorityRequirement("key", "/key"),),
        possible_effects=frozenset({Effect.READ}), idempotency_contract=Idempotency.IDEMPOTENT,
        approval_requirement=approval,
        scheduling_contract=SchedulingContract(timeout=15.0, max_attempts=1, budget_cost=1),
        destination="nowhere",
    )


def register(runtime: Runtime) -> None:
    """The extension hook `get_runtime()` calls (settings.DISPATCH_EXTENSIONS)."""
    runtime.register(_contract(NoopHandler, None), NoopHandler())
    runtime.register(_contract(GatedNoopHandler, ApprovalRequirement("operator", 3600)),
                     GatedNoopHandler())
