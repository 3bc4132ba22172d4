"""Agents of the frameworks the client's adapters serve, scripted: a LangGraph graph (a model's
node, then `ToolNode` with `exact_console.langgraph`'s tools, checkpointed in memory) and a
Pydantic AI model that calls one tool. Used by the live tests (tests/api) and the browser's
(tests/browser)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolCall
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo

from exact_console import Client
from exact_console.langgraph import tools
from tests.support.approvers import WAIT


@dataclass
class GraphAgent:
    """A LangGraph agent: the model's node, then `ToolNode` while it calls tools, checkpointed
    in memory. `seen` keeps the messages of each of the model's turns."""

    graph: Any
    seen: list[list[BaseMessage]] = field(default_factory=list)
    config: Any = field(default_factory=lambda: {"configurable": {"thread_id": "agent-1"}})

    def run(self, task: Any) -> dict[str, Any]:
        return dict(self.graph.invoke(task, self.config))


def agent_graph(client: Client, call: ToolCall, *, timeout: float = WAIT,
                agent_tools: list[Any] | None = None) -> GraphAgent:
    """The model calls `call`, then, shown the tool's message, answers with text. The tools are
    `client`'s interrupting tools, or `agent_tools` (an `AsyncClient`'s, say)."""
    model = FakeMessagesListChatModel(responses=[AIMessage("", tool_calls=[call]),
                                                 AIMessage("The refund email is handled.")])
    built = GraphAgent(graph=None)

    def think(state: MessagesState) -> dict[str, Any]:
        built.seen.append(list(state["messages"]))
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", think)
    builder.add_node("tools", ToolNode(agent_tools if agent_tools is not None
                                       else tools(client, timeout=timeout)))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    built.graph = builder.compile(checkpointer=InMemorySaver())
    return built


class ScriptedModel:
    """A scripted model: on a task it calls `email_send` (or `tool`) with its tool-call id; on
    a tool's return it answers with text. It keeps every request it was sent."""

    def __init__(self, arguments: dict[str, Any], call_id: str,
                 tool: str = "email_send") -> None:
        self.call = ToolCallPart(tool, arguments, tool_call_id=call_id)
        self.seen: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        if self.returns(messages):
            return ModelResponse(parts=[TextPart("The refund email is handled.")])
        return ModelResponse(parts=[self.call])

    @staticmethod
    def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
        """The tool returns of the last request: what the model sees of its call."""
        last = messages[-1]
        return [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(
            last, ModelRequest) else []
