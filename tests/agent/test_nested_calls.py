"""A native handler's nested call goes through the dispatcher, with the outer authority."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dispatch.agent import ScriptedAdapter, execution_open, execution_run, nested_call
from dispatch.handlers import FromCode, Handler, HandlerContext
from dispatch.models import Operation, Proposal
from dispatch.runtime import get_runtime
from protocols.contracts import Effect, Idempotency, OperationContract
from tests.conftest import World

pytestmark = pytest.mark.django_db


class EnrichHandler(Handler):
    name = "crm.enrich"
    implementation_fingerprint = FromCode()

    def destination(self) -> dict[str, Any]:
        return {"name": "crm", "address": "in-process"}

    def perform(self, ctx: HandlerContext) -> dict[str, Any]:
        found = {c: nested_call(ctx, "crm.lookup", {"customer_id": c})
                 for c in ctx.arguments["customers"]}
        return {c: [o.status, o.code] for c, o in found.items()}


@pytest.fixture
def enrich() -> Iterator[None]:
    get_runtime.cache_clear()
    get_runtime().register(OperationContract(
        qualified_name="crm.enrich", contract_version=1,
        implementation_fingerprint=EnrichHandler.implementation_fingerprint,
        input_type={"type": "object", "required": ["customers"],
                    "properties": {"customers": {"type": "array", "items": {"type": "string"}}}},
        output_type={"type": "object"}, authority_requirements=(),
        possible_effects=frozenset({Effect.READ}), idempotency_contract=Idempotency.IDEMPOTENT,
        destination="crm"), EnrichHandler())
    yield
    get_runtime.cache_clear()


def test_nested_calls_meet_the_dispatcher(enrich: None, world: World) -> None:
    world.owner.tools = [*world.owner.tools, "crm.enrich"]
    world.owner.save(update_fields=["tools"])
    from dispatch.services.authority import grant_issue

    grant_issue(issuer="admin", subject=world.owner, operations=["crm.enrich"], scope={},
                now=world.now)
    adapter = ScriptedAdapter({"agent": "owner", "steps": [
        {"call": "crm.enrich", "arguments": {"customers": ["cus-001", "cus-404"]}}]})
    execution = execution_open(principal=world.owner, adapter=adapter, now=world.now)
    result = execution_run(execution_id=execution.id, adapter=adapter)
    assert result.outcomes[0].status == "completed"
    assert result.outcomes[0].result == {"cus-001": ["completed", None],
                                         "cus-404": ["no_effect", None]}
    # Each nested call is its own proposal and operation beneath the same execution.
    nested = Proposal.objects.filter(execution_id=execution.id, operation="crm.lookup")
    assert nested.count() == 2
    assert Operation.objects.filter(proposal__in=nested).count() == 2


def test_nested_call_outside_the_tool_set_is_denied(enrich: None, world: World) -> None:
    world.owner.tools = ["crm.enrich"]
    world.owner.save(update_fields=["tools"])
    from dispatch.services.authority import grant_issue

    grant_issue(issuer="admin", subject=world.owner, operations=["crm.enrich"], scope={},
                now=world.now)
    adapter = ScriptedAdapter({"agent": "owner", "steps": [
        {"call": "crm.enrich", "arguments": {"customers": ["cus-001"]}}]})
    execution = execution_open(principal=world.owner, adapter=adapter, now=world.now)
    result = execution_run(execution_id=execution.id, adapter=adapter)
    assert result.outcomes[0].result == {"cus-001": ["denied", "tool_not_permitted"]}
