"""Model usage is accounting, limits are reservations (docs/design.md#budgets): usage is recorded
per turn in the transcript and summed per execution; a hard token limit exists only where the
adapter declares a per-call maximum, which is reserved through the budget counters before the
call."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch.agent import ScriptedAdapter, Usage, execution_open, execution_run
from dispatch.agent.adapters import ScriptError
from dispatch.agent.loop import model_tokens_key
from dispatch.models import BudgetCounter, TranscriptEntry
from dispatch.selectors.executions import execution_usage
from tests.conftest import World

pytestmark = pytest.mark.django_db

LOOKUP = {"call": "crm.lookup", "arguments": {"customer_id": "cus-001"}}


def turn(input_tokens: int, output_tokens: int, cost: str = "0.01") -> dict[str, Any]:
    return {**LOOKUP, "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                                "cost": cost}}


def run(world: World, script: dict[str, Any]) -> Any:
    adapter = ScriptedAdapter({"agent": "owner", **script})
    execution = execution_open(principal=world.owner, adapter=adapter, now=world.now)
    return execution_run(execution_id=execution.id, adapter=adapter, mode="inline")


def usage_of(world: World, result: Any) -> Usage:
    return execution_usage(result.execution_id, principal_id=world.owner.id)


def calls_made(execution_id: str) -> int:
    return TranscriptEntry.objects.filter(execution_id=execution_id, kind="tool_call").count()


def test_usage_is_recorded_per_turn_and_summed_per_execution(world: World) -> None:
    result = run(world, {"steps": [turn(100, 20, "0.002"), turn(150, 30, "0.003"),
                                   {"final": "done", "usage": {"input_tokens": 200,
                                                               "output_tokens": 5}}]})
    assert result.state == "finished"
    payloads = list(TranscriptEntry.objects.filter(
        execution_id=result.execution_id, kind__in=["tool_call", "final"]).order_by("seq")
        .values_list("payload", flat=True))
    assert [p["usage"] for p in payloads] == [
        {"input_tokens": 100, "output_tokens": 20, "cost": "0.002"},
        {"input_tokens": 150, "output_tokens": 30, "cost": "0.003"},
        {"input_tokens": 200, "output_tokens": 5, "cost": "0"}]
    assert usage_of(world, result) == Usage(450, 55, "0.005")


def test_a_declared_maximum_is_reserved_and_the_limit_holds(
    world: World, settings: Any,
) -> None:
    settings.BUDGET_MODEL_TOKENS_PER_EXECUTION = 300
    result = run(world, {"max_tokens_per_call": 150,
                         "steps": [turn(100, 20), turn(100, 20), turn(100, 20), {"final": "x"}]})
    # 0 + 150 fits, 120 kept; 120 + 150 fits, 240 kept; 240 + 150 does not: not asked.
    assert result.state == "finished"
    assert calls_made(result.execution_id) == 2
    final = TranscriptEntry.objects.get(execution_id=result.execution_id, kind="final").payload
    assert final["stopped"] == "budget_exhausted"
    assert BudgetCounter.objects.get(key=model_tokens_key(result.execution_id)).used == 240
    assert usage_of(world, result).tokens == 240


def test_without_a_declared_maximum_usage_is_accounted_never_limited(
    world: World, settings: Any,
) -> None:
    settings.BUDGET_MODEL_TOKENS_PER_EXECUTION = 300
    result = run(world, {"steps": [turn(100, 20), turn(100, 20), turn(100, 20), {"final": "x"}]})
    assert calls_made(result.execution_id) == 3
    assert usage_of(world, result).tokens == 360  # over the "limit", accounted
    assert not BudgetCounter.objects.filter(key=model_tokens_key(result.execution_id)).exists()


def test_a_scripted_model_honours_its_own_maximum() -> None:
    with pytest.raises(ScriptError, match="over the script's max_tokens_per_call of 100"):
        ScriptedAdapter({"agent": "owner", "max_tokens_per_call": 100,
                         "steps": [turn(90, 20)]})
    with pytest.raises(ScriptError, match="usage cost must be >= 0"):
        ScriptedAdapter({"agent": "owner", "steps": [turn(1, 1, "-1")]})


def test_the_approval_page_shows_the_executions_model_usage(live: World) -> None:
    from django.test import Client

    from dispatch.models import Proposal
    from tests.conftest import MAILBOX

    draft = {"kind": "email_draft", "payload": {"from": MAILBOX, "to": ["ada@example.com"],
                                                "subject": "Renewal", "body": "Confirmed."}}
    result = run(live, {"steps": [
        {"call": "resources.create", "name": "reply", "arguments": draft,
         "usage": {"input_tokens": 1200, "output_tokens": 34, "cost": "0.0042"}},
        {"call": "email.send", "arguments": {"draft": {"$result": "reply"}},
         "usage": {"input_tokens": 1300, "output_tokens": 21, "cost": "0.0045"}}]})
    assert result.state == "waiting"
    proposal = Proposal.objects.get(execution_id=result.execution_id)
    client = Client()
    assert client.login(username="approver", password="approver-pw")
    page = client.get(f"/console/approvals/{proposal.approval.id}/").content.decode()
    assert "Model usage" in page
    assert "2555 tokens" in page
    assert "(2500 in, 55 out), cost 0.0087" in page


class OverReporting:
    """An adapter that promises a maximum and then reports more (a provider's max_tokens
    bounds the output, its usage counts the input too)."""

    name = "over-reporting"
    max_tokens_per_call = 100

    def __init__(self) -> None:
        self.asked = 0

    def config(self) -> dict[str, Any]:
        return {}

    def next_action(self, transcript: Any, tools: Any) -> Any:
        from dispatch.agent import ToolCall

        self.asked += 1
        return ToolCall(name="crm.lookup", arguments={"customer_id": "cus-001"},
                        usage=Usage(input_tokens=250, output_tokens=50))


def test_usage_over_the_promised_maximum_is_charged_and_stops_the_run(
    world: World, settings: Any,
) -> None:
    settings.BUDGET_MODEL_TOKENS_PER_EXECUTION = 500
    adapter = OverReporting()
    execution = execution_open(principal=world.owner, adapter=adapter, now=world.now)
    result = execution_run(execution_id=execution.id, adapter=adapter, mode="inline")
    # Turn 1: 100 reserved, 300 used: charged 300. Turn 2: 300 + 100 fits, 300 used: charged
    # to the limit, 500. Turn 3: nothing fits, the model is not asked.
    assert adapter.asked == 2
    assert BudgetCounter.objects.get(key=model_tokens_key(result.execution_id)).used == 500
    assert usage_of(world, result).tokens == 600  # the truth: the transcript
    final = TranscriptEntry.objects.get(execution_id=result.execution_id, kind="final").payload
    assert final["stopped"] == "budget_exhausted"


class Legacy:
    """An adapter written before usage accounting: no max_tokens_per_call, no usage."""

    name = "legacy"

    def config(self) -> dict[str, Any]:
        return {}

    def next_action(self, transcript: Any, tools: Any) -> Any:
        from dispatch.agent import FinalAnswer

        return FinalAnswer("done")


def test_an_adapter_without_the_new_attribute_still_runs(world: World, settings: Any) -> None:
    settings.BUDGET_MODEL_TOKENS_PER_EXECUTION = 500
    adapter = Legacy()
    execution = execution_open(principal=world.owner, adapter=adapter,  # type: ignore[arg-type]
                               now=world.now)
    result = execution_run(execution_id=execution.id, adapter=adapter)  # type: ignore[arg-type]
    assert (result.state, result.final) == ("finished", "done")


def test_a_proposal_naming_another_principals_execution_shows_no_usage(
    live: World, destinations: Any,
) -> None:
    """A proposal's execution_id is the caller's word: another agent's execution (or another
    tenant's) lends it no usage figures on the approval page."""
    from django.test import Client

    from dispatch.services.proposals import proposal_create
    from dispatch.services.resources import resource_create

    other = run(live, {"steps": [turn(9000, 999, "12.5")]})
    resource, _ = resource_create(principal=live.outsider, kind="email_draft", payload={
        "from": "ops@globex.example", "to": ["a@example.com"], "subject": "s", "body": "b"},
        now=live.now)
    proposal = proposal_create(principal=live.outsider, operation="email.send", arguments={
        "draft": {"id": resource.id, "revision": 1}}, execution_id=other.execution_id,
        now=live.now)
    client = Client()
    assert client.login(username="outsider-operator", password="pw")
    page = client.get(f"/console/approvals/{proposal.approval.id}/").content.decode()
    assert proposal.execution_id == other.execution_id
    assert "Model usage" not in page
    assert "9999" not in page
