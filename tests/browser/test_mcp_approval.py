"""An MCP agent's task waits until an operator approves it in the browser, then completes with
one effect (docs/mcp.md#tasks): the official client over streamable HTTP, the gateway process,
a real worker, the bank, and Chromium."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest
from playwright.sync_api import expect

from demo.destinations.runner import list_all
from dispatch.models import ApprovalRequest, Operation
from tests.support.mcp import Gateway, Stack, http_client
from tests.support.mcp_tasks import legacy_get, legacy_result, legacy_task_call, poll_until_ended
from tests.support.workers import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser, pytest.mark.redis,
              pytest.mark.slow]

TRANSFER = {"from_account": "acct-001", "to_account": "acct-999", "amount": "1250.00",
            "currency": "EUR", "memo": "supplier invoice 88"}


def test_an_mcp_task_waits_for_the_operator_in_the_browser_then_completes(
        stack: Stack, gateway: Gateway, page: Any, login: Any) -> None:
    seen: dict[str, Any] = {}

    async def agent() -> None:
        async with http_client(gateway.url, stack.world.owner_token, mode="legacy") as client:
            created = await legacy_task_call(client, "payments.transfer", TRANSFER)
            seen["task_id"] = created["task"]["taskId"]
            seen["first"] = (await legacy_get(client, seen["task_id"])).status
            seen["ended"] = await poll_until_ended(legacy_get, client, seen["task_id"], 120)
            seen["result"] = await legacy_result(client, seen["task_id"])

    def run_agent() -> None:
        try:
            anyio.run(agent)
        except BaseException as exc:  # handed to the test thread
            seen["error"] = exc

    thread = threading.Thread(target=run_agent, daemon=True)
    thread.start()
    wait_for(lambda: "task_id" in seen or "error" in seen, 60, "the task to be created")
    assert "error" not in seen, seen.get("error")
    approval = ApprovalRequest.objects.get(proposal_id=seen["task_id"])
    assert approval.state == "pending"

    login("approver", "approver-pw")
    page.goto(f"/console/approvals/{approval.id}/")
    expect(page.get_by_text("supplier invoice 88").first).to_be_visible()
    # Who is asking: the agent, through MCP, and the client as it names itself.
    expect(page.get_by_text("Proposed through MCP by owner")).to_be_visible()
    expect(page.get_by_text("client: mcp")).to_be_visible()
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Approved. Permit")).to_be_visible()

    thread.join(timeout=120)
    assert not thread.is_alive()
    assert "error" not in seen, seen.get("error")
    assert seen["first"] == "working"
    assert seen["ended"].status == "completed"
    operation = Operation.objects.get(proposal_id=seen["task_id"])
    assert seen["result"].structured_content["operation"]["state"] == "completed"
    bank = list_all(stack.destinations.directory)["bank"]
    assert [(t["key"], t["amount"]) for t in bank] == [(operation.id, "1250.00")]
