"""A LangChain agent loop over HTTP: a chat model's tool call, made a `ToolMessage` by the
client's LangChain tools (`exact_console.langchain`), is a proposal an operator decides, and the
email is sent by the console's handler (run by the eager task queue), once."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import BaseTool
from pydantic import Field

from demo.destinations.runner import list_all
from dispatch.models import Proposal
from exact_console import Client
from exact_console.langchain import tools
from tests.api.conftest import TRANSFER, draft_arguments
from tests.conftest import World
from tests.support.approvers import WAIT, operator_decides, while_operator_decides
from tests.support.destinations import Destinations

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


class ToolCallingFake(FakeMessagesListChatModel):
    """LangChain's fake chat model, answering its scripted messages; it takes tools as a real
    chat model does (they are what the script's tool calls name). `seen` keeps the messages of
    each of its turns."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ToolCallingFake:
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


def run_agent(model: ToolCallingFake, agent_tools: list[BaseTool], task: str) -> list[BaseMessage]:
    """The smallest tool-calling loop: ask the model, run the tool calls it makes, feed their
    messages back, until it answers without one."""
    by_name = {t.name: t for t in agent_tools}
    bound = model.bind_tools(agent_tools)
    messages: list[BaseMessage] = [HumanMessage(task)]
    for _ in range(5):
        answer = bound.invoke(messages)
        messages.append(answer)
        if not answer.tool_calls:
            return messages
        messages.extend(by_name[call["name"]].invoke(call) for call in answer.tool_calls)
    raise AssertionError("the model never stopped calling tools")


def send_call(agent: Client, call_id: str) -> ToolCall:
    return ToolCall(name="email_send", args=draft_arguments(agent), id=call_id,
                    type="tool_call")


def script(call: ToolCall) -> ToolCallingFake:
    return ToolCallingFake(responses=[AIMessage("", tool_calls=[call]),
                                      AIMessage("The refund email is sent.")])


def test_a_tool_call_granted_by_the_operator_sends_the_email_once(
        agent: Client, world: World, destinations: Destinations) -> None:
    # The LangChain tools are the contracts; the draft is made with the client first.
    call = send_call(agent, "call_send_1")
    agent_tools: list[BaseTool] = list(tools(agent, timeout=WAIT))
    assert {"email_send", "crm_lookup"} <= {t.name for t in agent_tools}
    operator, decided = operator_decides(world, "grant")

    messages = while_operator_decides(operator, lambda: run_agent(script(call), agent_tools,
                                                     "Send the refund email."))

    assert len(decided) == 1
    [answer] = [m for m in messages if isinstance(m, ToolMessage)]
    assert (answer.status, answer.tool_call_id, answer.name) == (
        "success", "call_send_1", "email_send")
    operation = answer.artifact
    assert operation["state"] == "completed"
    assert json.loads(str(answer.content)) == operation["result"] == {
        "message_id": f"{operation['id']}@console.invalid"}
    assert messages[-1].content == "The refund email is sent."
    sent = list_all(destinations.directory)["email"]
    assert [m["message_id"] for m in sent] == [f"{operation['id']}@console.invalid"]

    # A replayed run invokes the same tool call again: the first proposal answers, nothing
    # more is proposed or sent.
    [send] = [t for t in agent_tools if t.name == "email_send"]
    again = send.invoke(call)
    assert (again.status, again.content) == ("success", answer.content)
    assert Proposal.objects.filter(principal=world.owner).count() == 1
    assert Proposal.objects.get(principal=world.owner).call_id == "call_send_1"
    assert len(list_all(destinations.directory)["email"]) == 1


def test_a_denied_tool_call_is_the_models_error_text_approval_denied(
        agent: Client, world: World, destinations: Destinations) -> None:
    call = send_call(agent, "call_send_2")
    agent_tools: list[BaseTool] = list(tools(agent, timeout=WAIT))
    operator, decided = operator_decides(world, "deny")
    model = script(call)

    messages = while_operator_decides(operator, lambda: run_agent(model, agent_tools,
                                                     "Send the refund email."))

    assert len(decided) == 1
    [answer] = [m for m in messages if isinstance(m, ToolMessage)]
    assert answer.status == "error"
    assert str(answer.content).startswith("approval_denied: ")
    assert answer.tool_call_id == "call_send_2"
    assert len(model.seen) == 2  # the call, then its answer: nothing retried
    assert model.seen[-1][-1] == answer  # the model's next turn is shown the denial
    assert list_all(destinations.directory)["email"] == []
    assert Proposal.objects.filter(principal=world.owner).count() == 1


def test_the_tools_are_the_agents_tool_set_and_a_call_outside_it_is_tool_not_permitted(
        narrow_agent: Client, world: World, destinations: Destinations) -> None:
    # This agent's tool set leaves out payments.transfer: it is not offered as a tool, as the
    # MCP gateway does not list it.
    agent_tools: list[BaseTool] = list(tools(narrow_agent, timeout=WAIT))
    assert sorted(t.name for t in agent_tools) == ["crm_lookup", "email_send"]
    # A program that names it gets it (docs/frameworks.md); a model calling it is refused by
    # the dispatcher, not by the listing.
    [transfer] = tools(narrow_agent, operations=["payments.transfer"], timeout=WAIT)
    assert transfer.name == "payments_transfer"
    call = ToolCall(name="payments_transfer", args=TRANSFER, id="call_pay_1", type="tool_call")
    model = script(call)

    messages = run_agent(model, [transfer], "Pay the supplier.")

    [answer] = [m for m in messages if isinstance(m, ToolMessage)]
    assert answer.status == "error"
    assert str(answer.content).startswith("tool_not_permitted: ")
    assert answer.artifact["code"] == "tool_not_permitted"
    assert model.seen[-1][-1] == answer  # the model's next turn is shown the refusal
    assert not Proposal.objects.exists()
    assert list_all(destinations.directory)["bank"] == []
