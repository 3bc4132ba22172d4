"""Calls that wait on an operator, through the gateway process and the official client: tasks on
2025-11-25 and on the 2026-07-28 extension, the waiting answer without tasks, idempotency keys,
tenants, and a gateway restart while a task is working (docs/mcp.md#tasks)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from django.utils import timezone
from mcp import Client, MCPError

from demo.destinations.runner import list_all
from dispatch.models import ApprovalRequest, Operation, Proposal
from dispatch.services.approvals import approval_decide
from dispatch.services.principals import token_issue
from tests.mcp.conftest import Gateway, Stack, http_client
from tests.support.mcp_tasks import (
    TasksExtension,
    legacy_cancel,
    legacy_get,
    legacy_list,
    legacy_result,
    legacy_task_call,
    modern_get,
    modern_task_call,
    poll_until_ended,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.slow]

TRANSFER = {"from_account": "acct-001", "to_account": "acct-999", "amount": "25.00",
            "currency": "EUR", "memo": "invoice 7"}


def decide(stack: Stack, proposal_id: str, decision: str = "grant") -> None:
    """An operator decides the proposal's pending approval (as the console's button does)."""
    approval = ApprovalRequest.objects.select_related("proposal").get(proposal_id=proposal_id)
    approval_decide(approver=stack.world.approver, approval_id=approval.id, decision=decision,
                    digest=approval.proposal.digest, now=timezone.now())


def transfers(stack: Stack) -> list[tuple[str, str]]:
    return [(t["key"], t["amount"]) for t in list_all(stack.destinations.directory)["bank"]]


def test_a_2025_task_stays_working_until_approved_then_completes_with_one_transfer(
        stack: Stack, gateway: Gateway) -> None:
    async def scenario() -> tuple[Any, ...]:
        async with http_client(gateway.url, stack.world.owner_token, mode="legacy") as client:
            created = await legacy_task_call(client, "payments.transfer", TRANSFER)
            task_id = created["task"]["taskId"]
            await anyio.sleep(1.5)
            waiting = await legacy_get(client, task_id)
            assert not await anyio.to_thread.run_sync(transfers, stack)
            await anyio.to_thread.run_sync(decide, stack, task_id)
            ended = await poll_until_ended(legacy_get, client, task_id)
            result = await legacy_result(client, task_id)
            listed = await legacy_list(client)
            return created, waiting, ended, result, listed

    created, waiting, ended, result, listed = anyio.run(scenario)
    assert created["task"]["status"] == "working"
    assert waiting.status == "working"
    assert ended.status == "completed"
    operation = Operation.objects.get(proposal_id=created["task"]["taskId"])
    assert result.is_error is False
    assert result.structured_content == {
        "proposal_id": operation.proposal_id,
        "operation": {"id": operation.id, "state": "completed", "result": operation.result}}
    assert transfers(stack) == [(operation.id, "25.00")]
    assert created["task"]["taskId"] in [task.task_id for task in listed.tasks]


def test_a_denied_2026_task_fails_with_approval_denied_over_stdio(stack: Stack) -> None:
    async def scenario() -> tuple[Any, Any]:
        async with Client(stack.stdio(stack.world.owner_token), mode="2026-07-28",
                          extensions=[TasksExtension()]) as client:
            created = await modern_task_call(client, "payments.transfer", TRANSFER)
            await anyio.to_thread.run_sync(decide, stack, created.task_id, "deny")
            return created, await poll_until_ended(modern_get, client, created.task_id)

    created, ended = anyio.run(scenario)
    assert created.status == "working"
    assert ended.status == "failed"
    assert ended.result is not None and ended.result["isError"] is True
    assert ended.result["structuredContent"]["error"]["code"] == "approval_denied"
    assert ended.error is not None and ended.error["data"]["error"]["code"] == "approval_denied"
    assert not Operation.objects.filter(proposal_id=created.task_id).exists()
    assert transfers(stack) == []


def test_tasks_cancel_before_the_decision_withdraws_the_proposal_and_nothing_runs(
        stack: Stack, gateway: Gateway) -> None:
    async def scenario() -> tuple[Any, Any, Any]:
        async with http_client(gateway.url, stack.world.owner_token, mode="legacy") as client:
            created = await legacy_task_call(client, "payments.transfer", TRANSFER)
            task_id = created["task"]["taskId"]
            cancelled = await legacy_cancel(client, task_id)
            with pytest.raises(MCPError):  # an ended task is not cancelled twice
                await legacy_cancel(client, task_id)
            return task_id, cancelled, await legacy_result(client, task_id)

    task_id, cancelled, result = anyio.run(scenario)
    assert cancelled.status == "cancelled"
    assert Proposal.objects.get(id=task_id).cancelled_at is not None
    assert result.is_error is True
    with pytest.raises(Exception, match="approval"):  # the withdrawn approval is not decided
        decide(stack, task_id)
    assert not Operation.objects.filter(proposal_id=task_id).exists()
    assert transfers(stack) == []


def test_without_tasks_a_call_answers_approval_pending_and_proposal_status_the_outcome_later(
        stack: Stack, gateway: Gateway) -> None:
    async def scenario() -> tuple[Any, Any]:
        async with http_client(gateway.url, stack.world.owner_token) as client:
            progress: list[str | None] = []

            async def seen(done: float, total: float | None, message: str | None) -> None:
                progress.append(message)

            pending = await client.call_tool("payments_transfer", TRANSFER,
                                             progress_callback=seen)
            assert progress and progress[0] == "waiting for an operator's decision"
            proposal_id = pending.structured_content["proposal_id"]
            await anyio.to_thread.run_sync(decide, stack, proposal_id)
            with anyio.fail_after(60):
                while True:
                    status = await client.call_tool("proposal_status",
                                                    {"proposal_id": proposal_id})
                    operation = status.structured_content.get("operation")
                    if isinstance(operation, dict) and operation["state"] == "completed":
                        return pending, status
                    await anyio.sleep(0.3)

    pending, status = anyio.run(scenario)
    assert pending.is_error is False
    body = pending.structured_content
    assert body["status"] == "approval_pending"
    approval = ApprovalRequest.objects.get(proposal_id=body["proposal_id"])
    assert body["approval_url"].endswith(f"/console/approvals/{approval.id}/")
    assert body["digest"] == Proposal.objects.get(id=body["proposal_id"]).digest
    operation = Operation.objects.get(proposal_id=body["proposal_id"])
    assert status.structured_content["operation"] == {
        "id": operation.id, "state": "completed", "result": operation.result}
    assert transfers(stack) == [(operation.id, "25.00")]


def test_a_call_retried_with_its_idempotency_key_is_one_proposal_and_one_effect(
        stack: Stack, gateway: Gateway) -> None:
    key = {"idempotency_key": "transfer-invoice-7"}

    async def scenario() -> list[Any]:
        answers = []
        for _ in range(2):  # the first answer lost: the agent asks again, on a new connection
            async with http_client(gateway.url, stack.world.owner_token) as client:
                answers.append(await client.call_tool("payments.transfer", TRANSFER, meta=key))
        proposal_id = answers[0].structured_content["proposal_id"]
        await anyio.to_thread.run_sync(decide, stack, proposal_id)
        async with http_client(gateway.url, stack.world.owner_token) as client:
            with anyio.fail_after(60):
                while True:
                    again = await client.call_tool("payments.transfer", TRANSFER, meta=key)
                    if again.structured_content.get("operation", {}).get("state") == "completed":
                        answers.append(again)
                        break
                    await anyio.sleep(0.3)
            other = {**TRANSFER, "amount": "99.00"}
            answers.append(await client.call_tool("payments.transfer", other, meta=key))
        return answers

    first, second, settled, mismatch = anyio.run(scenario)
    proposal_id = first.structured_content["proposal_id"]
    assert second.structured_content["proposal_id"] == proposal_id
    assert settled.structured_content["proposal_id"] == proposal_id
    assert Proposal.objects.filter(principal=stack.world.owner).count() == 1
    operation = Operation.objects.get(proposal_id=proposal_id)
    assert transfers(stack) == [(operation.id, "25.00")]
    assert mismatch.is_error is True
    assert mismatch.structured_content["error"]["code"] == "proposal_mismatch"


def test_agents_of_two_tenants_see_only_their_own_tools_and_proposals(
        stack: Stack, gateway: Gateway) -> None:
    outsider = stack.world.outsider
    outsider.tools = ["email.send"]
    outsider.save(update_fields=["tools"])
    outsider_token = token_issue(principal=outsider)

    async def scenario() -> tuple[Any, ...]:
        async with http_client(gateway.url, stack.world.owner_token, mode="legacy") as client:
            created = await legacy_task_call(client, "payments.transfer", TRANSFER)
        task_id = created["task"]["taskId"]
        async with http_client(gateway.url, outsider_token, mode="legacy") as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            status = await client.call_tool("proposal.status", {"proposal_id": task_id})
            refused = await client.call_tool("payments.transfer", TRANSFER)
            with pytest.raises(MCPError):
                await legacy_get(client, task_id)
            listed = await legacy_list(client)
        return tools, status, refused, listed

    tools, status, refused, listed = anyio.run(scenario)
    assert tools == ["email.send", "resource.create", "resource.revise", "proposal.status"]
    assert status.is_error and status.structured_content["error"]["code"] == "not_found"
    assert refused.is_error
    assert refused.structured_content["error"]["code"] == "tool_not_permitted"
    assert listed.tasks == []


def test_a_working_task_is_answered_after_the_gateway_restarts(
        stack: Stack, gateway: Gateway) -> None:
    async def before() -> str:
        async with http_client(gateway.url, stack.world.owner_token, mode="legacy") as client:
            created = await legacy_task_call(client, "payments.transfer", TRANSFER)
            return str(created["task"]["taskId"])

    async def after(task_id: str) -> tuple[Any, Any]:
        async with http_client(gateway.url, stack.world.owner_token, mode="legacy") as client:
            waiting = await legacy_get(client, task_id)
            await anyio.to_thread.run_sync(decide, stack, task_id)
            return waiting, await poll_until_ended(legacy_get, client, task_id)

    task_id = anyio.run(before)
    gateway.restart()  # SIGKILL: nothing of the task lived in the process
    waiting, ended = anyio.run(after, task_id)
    assert waiting.status == "working"
    assert ended.status == "completed"
    operation = Operation.objects.get(proposal_id=task_id)
    assert transfers(stack) == [(operation.id, "25.00")]
