"""An OpenAI Agents SDK agent's email waits until an operator approves it in the browser, then is
sent once (docs/frameworks.md#openai-agents): the SDK's `Runner` with a scripted model and the
client's tools over HTTP, the live console, a real worker, the SMTP sink, and Chromium."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from agents import Agent, Runner
from playwright.sync_api import expect

from demo.destinations.runner import list_all
from dispatch.models import ApprovalRequest, Operation
from exact_console import Client
from exact_console.openai_agents import tools
from tests.api.conftest import draft_arguments
from tests.support.mcp import Stack
from tests.support.sdk_model import ANSWER, OFFLINE, ScriptedModel
from tests.support.workers import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser, pytest.mark.redis,
              pytest.mark.slow]


def test_an_sdk_agents_email_waits_for_the_operator_in_the_browser_then_is_sent_once(
        stack: Stack, live_server: Any, page: Any, login: Any) -> None:
    seen: dict[str, Any] = {}
    with Client(live_server.url, stack.world.owner_token, timeout=30) as console:
        model = ScriptedModel("email_send", draft_arguments(console), "call_send_b1")
        agent = Agent(name="support", model=model, tools=list(tools(console, timeout=120)))

        def run_agent() -> None:
            try:
                seen["result"] = Runner.run_sync(agent, "Send the refund email.",
                                                 run_config=OFFLINE)
            except BaseException as exc:  # handed to the test thread
                seen["error"] = exc

        thread = threading.Thread(target=run_agent, daemon=True)
        thread.start()
        wait_for(lambda: "error" in seen or ApprovalRequest.objects.filter(
            proposal__principal=stack.world.owner).exists(), 60, "the proposal")
        assert "error" not in seen, seen.get("error")
        approval = ApprovalRequest.objects.get(proposal__principal=stack.world.owner)
        assert approval.state == "pending"
        assert approval.proposal.call_id == "call_send_b1"

        login("approver", "approver-pw")
        page.goto(f"/console/approvals/{approval.id}/")
        expect(page.get_by_text("customer@example.com").first).to_be_visible()
        page.get_by_role("button", name="Approve").click()
        expect(page.get_by_text("Approved. Permit")).to_be_visible()

        thread.join(timeout=120)
    assert not thread.is_alive()
    assert "error" not in seen, seen.get("error")
    assert seen["result"].final_output == ANSWER
    operation = Operation.objects.get(proposal=approval.proposal)
    assert operation.state == "completed"
    assert json.loads(model.answer()) == {"message_id": f"{operation.id}@console.invalid"}
    sent = list_all(stack.destinations.directory)["email"]
    assert [m["message_id"] for m in sent] == [f"{operation.id}@console.invalid"]
