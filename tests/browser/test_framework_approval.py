"""An agent framework's paused run waits until an operator approves in the browser, then
resumes with one effect (docs/frameworks.md): the Python client's adapters over HTTP against the
live server, a real worker, the SMTP sink, and Chromium. The operator opens the approval page
the paused run reported."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
from langchain_core.messages import HumanMessage, ToolCall, ToolMessage
from langgraph.types import Command
from playwright.sync_api import expect
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.models.function import FunctionModel

from demo.destinations.runner import list_all
from dispatch.models import Operation, Proposal
from exact_console import Client
from exact_console.pydantic_ai import results_from_console, toolset
from tests.support.agents import ScriptedModel, agent_graph
from tests.support.approvers import WAIT
from tests.support.mcp import Stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser, pytest.mark.redis,
              pytest.mark.slow]

SUBJECT = "Your refund for order 5521"

T = TypeVar("T")


def off_the_event_loop(run: Callable[[], T]) -> T:
    """`run()` in a thread of its own: Pydantic AI's `run_sync` runs an event loop, and
    Playwright's sync API already runs one in the test's thread."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(run).result(timeout=2 * WAIT)


def draft_arguments(console: Client) -> dict[str, Any]:
    draft = console.create_resource("email_draft", {
        "from": "support@acme.example", "to": ["ada@example.com"], "subject": SUBJECT,
        "body": "We have refunded your order #5521."})
    return {"draft": {"id": draft["id"], "revision": 1}}


def approve_in_the_browser(page: Any, login: Any, approval_url: str) -> None:
    login("approver", "approver-pw")
    page.goto(approval_url)
    expect(page.get_by_text(SUBJECT).first).to_be_visible()
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Approved. Permit")).to_be_visible()


def test_a_langgraph_agent_resumes_after_the_operator_approves_in_the_browser(
        stack: Stack, live_server: Any, page: Any, login: Any) -> None:
    with Client(live_server.url, stack.world.owner_token, timeout=60) as console:
        call = ToolCall(name="email_send", args=draft_arguments(console), id="call_lg_1",
                        type="tool_call")
        running = agent_graph(console, call)

        [pause] = running.run({"messages": [HumanMessage("Send the refund email.")]})[
            "__interrupt__"]
        waiting = pause.value[0]["exact_console"]
        proposal = Proposal.objects.get(principal=stack.world.owner)
        assert waiting["proposal_id"] == proposal.id
        assert list_all(stack.destinations.directory)["email"] == []

        approve_in_the_browser(page, login, waiting["approval_url"])
        resumed = running.run(Command(resume=True))

    assert "__interrupt__" not in resumed
    [answer] = [m for m in resumed["messages"] if isinstance(m, ToolMessage)]
    assert (answer.status, answer.tool_call_id) == ("success", "call_lg_1")
    operation = Operation.objects.get(proposal=proposal)
    assert answer.artifact["id"] == operation.id
    sent = list_all(stack.destinations.directory)["email"]
    assert [(m["message_id"], m["subject"]) for m in sent] == [
        (f"{operation.id}@console.invalid", SUBJECT)]
    assert Proposal.objects.count() == 1


def test_a_deferred_pydantic_ai_run_resumes_after_the_operator_approves_in_the_browser(
        stack: Stack, live_server: Any, page: Any, login: Any) -> None:
    with Client(live_server.url, stack.world.owner_token, timeout=60) as console:
        model = ScriptedModel(draft_arguments(console), "call_pai_1")
        agent = Agent(FunctionModel(model), toolsets=[toolset(console, deferred=True)],
                      output_type=[str, DeferredToolRequests])

        first = off_the_event_loop(lambda: agent.run_sync("Send the refund email."))
        requests = first.output
        assert isinstance(requests, DeferredToolRequests)
        waiting = requests.metadata["call_pai_1"]["exact_console"]
        assert list_all(stack.destinations.directory)["email"] == []

        approve_in_the_browser(page, login, waiting["approval_url"])
        results = results_from_console(console, requests, timeout=WAIT)
        resumed = off_the_event_loop(lambda: agent.run_sync(
            message_history=first.all_messages(), deferred_tool_results=results))

    assert resumed.output == "The refund email is handled."
    [answer] = ScriptedModel.returns(model.seen[-1])
    assert (answer.outcome, answer.tool_call_id) == ("success", "call_pai_1")
    operation = Operation.objects.get(proposal_id=waiting["proposal_id"])
    sent = list_all(stack.destinations.directory)["email"]
    assert [(m["message_id"], m["subject"]) for m in sent] == [
        (f"{operation.id}@console.invalid", SUBJECT)]
    assert Proposal.objects.count() == 1
