"""The lifecycle model's extension (extension API 1): three contracts shaped like the demo's,
each served by a handler that talks to an in-process destination model
(tests/model/destinations.py) instead of a real bank, mail system or publisher.

Loaded only by the model's runs, which add it to `settings.DISPATCH_EXTENSIONS` beside the demo
(whose `email_draft` kind `model.publish` acts on) and rebuild the runtime:

- `model.transfer`: like `payments.transfer`: approval, `receiver_dedup` (the bank deduplicates
  on the operation id), at most 3 attempts, lookups authoritative both ways;
- `model.notify`: like `email.send` without its resource: approval, idempotency `none` (the
  mail system delivers every request), 1 attempt, a lookup proves presence only;
- `model.publish`: like `report.publish` on an `email_draft` resource, whose protocol moves on
  the claim and on the outcome: approval, `receiver_dedup`, 3 attempts, lookups authoritative;
- `model.pay`: `model.transfer` with a `currency`, at the same bank, for the workflow model's
  approval rules and spend caps (tests/model/workflows.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from demo.contracts import OUTCOME_STATES, RESOURCE_REF
from dispatch.handlers import (
    DefiniteFailure,
    FromCode,
    Handler,
    HandlerContext,
    LookupResult,
)
from dispatch.runtime import Runtime
from protocols.contracts import (
    ApprovalRequirement,
    AuthorityRequirement,
    Effect,
    Idempotency,
    OperationContract,
    Reconciliation,
    SchedulingContract,
)
from tests.model.destinations import environment

EXTENSION_API = 1

TRANSFER, NOTIFY, PUBLISH = "model.transfer", "model.notify", "model.publish"
PAY = "model.pay"
TIMEOUT = 15.0
APPROVAL_WINDOW = 3600
TEXT: dict[str, Any] = {"type": "string", "maxLength": 200}


class _ModelHandler(Handler):
    """A correct handler, as the runtime assumes one: it checks the cancellation before the
    effect and never sends past the contract deadline (as `within_deadline` does for the demo
    handlers), then sends. The deadline is on the model's clock (tests/model/machine.py
    replaces the handlers' monotonic clock), so a worker paused past it sends nothing."""

    destination_name: ClassVar[str]

    def destination(self) -> dict[str, Any]:
        return {"name": self.destination_name, "address": "in-process"}

    def perform(self, ctx: HandlerContext) -> dict[str, Any]:
        env = environment()
        if ctx.cancelled.is_set():
            raise DefiniteFailure("cancelled before the effect; nothing was sent")
        env.reached("handler.during_effect")  # checked, about to send
        if ctx.remaining() <= 0:
            raise DefiniteFailure("no time left before the contract timeout; nothing was sent")
        return env.destination(self.destination_name).call(
            key=ctx.operation_id, attempt=ctx.attempt, now=env.now(), timeout=ctx.timeout)

    def lookup(self, operation_id: str, snapshot: dict[str, Any]) -> LookupResult:
        return environment().destination(self.destination_name).lookup(operation_id)


class TransferHandler(_ModelHandler):
    name = TRANSFER
    destination_name = "model-bank"
    implementation_fingerprint = FromCode("tests.model.destinations")


class PayHandler(_ModelHandler):
    name = PAY
    destination_name = "model-bank"
    implementation_fingerprint = FromCode("tests.model.destinations")


class NotifyHandler(_ModelHandler):
    name = NOTIFY
    destination_name = "model-mail"
    implementation_fingerprint = FromCode("tests.model.destinations")


class PublishHandler(_ModelHandler):
    name = PUBLISH
    destination_name = "model-publisher"
    implementation_fingerprint = FromCode("tests.model.destinations")


def _approval() -> ApprovalRequirement:
    return ApprovalRequirement(role="operator", expires_in=APPROVAL_WINDOW)


def transfer_contract(fingerprint: str) -> OperationContract:
    return OperationContract(
        qualified_name=TRANSFER, contract_version=1, implementation_fingerprint=fingerprint,
        input_type={"type": "object", "additionalProperties": False,
                    "required": ["from_account", "to_account", "amount"],
                    "properties": {"from_account": TEXT, "to_account": TEXT, "amount": TEXT,
                                   "memo": {**TEXT, "default": ""}}},
        output_type={"type": "object"},
        authority_requirements=(AuthorityRequirement("account", "/from_account"),),
        possible_effects=frozenset({Effect.EXTERNAL_WRITE, Effect.FINANCIAL_WRITE}),
        approval_requirement=_approval(),
        idempotency_contract=Idempotency.RECEIVER_DEDUP,
        scheduling_contract=SchedulingContract(timeout=TIMEOUT, max_attempts=3, budget_cost=1),
        destination="model-bank",
        reconciliation=Reconciliation.PRESENCE_AND_ABSENCE,
    )


def pay_contract(fingerprint: str) -> OperationContract:
    """`model.transfer` with a `currency` the approval rules and spend caps read."""
    transfer = transfer_contract(fingerprint)
    properties = {**transfer.input_type["properties"],
                  "currency": {"type": "string", "pattern": "^[A-Z]{3}$"}}
    properties.pop("memo")
    return replace(transfer, qualified_name=PAY, input_type={
        **transfer.input_type, "properties": properties,
        "required": ["from_account", "to_account", "amount", "currency"]})


def notify_contract(fingerprint: str) -> OperationContract:
    return OperationContract(
        qualified_name=NOTIFY, contract_version=1, implementation_fingerprint=fingerprint,
        input_type={"type": "object", "additionalProperties": False,
                    "required": ["channel", "text"],
                    "properties": {"channel": TEXT, "text": TEXT}},
        output_type={"type": "object"},
        authority_requirements=(AuthorityRequirement("channel", "/channel"),),
        possible_effects=frozenset({Effect.EXTERNAL_WRITE}),
        approval_requirement=_approval(),
        idempotency_contract=Idempotency.NONE,
        scheduling_contract=SchedulingContract(timeout=TIMEOUT, max_attempts=1, budget_cost=1),
        destination="model-mail",
        reconciliation=Reconciliation.PRESENCE,
    )


def publish_contract(fingerprint: str) -> OperationContract:
    return OperationContract(
        qualified_name=PUBLISH, contract_version=1, implementation_fingerprint=fingerprint,
        input_type={"type": "object", "additionalProperties": False, "required": ["doc"],
                    "properties": {"doc": RESOURCE_REF}},
        output_type={"type": "object"},
        authority_requirements=(AuthorityRequirement("mailbox", "/doc/payload/from"),),
        possible_effects=frozenset({Effect.EXTERNAL_WRITE}),
        protocol_preconditions={"doc": "email_draft"},
        protocol_outcomes=OUTCOME_STATES,
        approval_requirement=_approval(),
        idempotency_contract=Idempotency.RECEIVER_DEDUP,
        scheduling_contract=SchedulingContract(timeout=TIMEOUT, max_attempts=3, budget_cost=1),
        destination="model-publisher",
        reconciliation=Reconciliation.PRESENCE_AND_ABSENCE,
    )


HANDLERS: dict[str, Handler] = {
    TRANSFER: TransferHandler(), NOTIFY: NotifyHandler(), PUBLISH: PublishHandler(),
    PAY: PayHandler()}
CONTRACTS = {TRANSFER: transfer_contract, NOTIFY: notify_contract, PUBLISH: publish_contract,
             PAY: pay_contract}


def register(runtime: Runtime) -> None:
    for name, contract in CONTRACTS.items():
        handler = HANDLERS[name]
        runtime.register(contract(handler.implementation_fingerprint), handler)
