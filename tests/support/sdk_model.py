"""A scripted model for the OpenAI Agents SDK: the SDK's `Model` interface, answering without a
network, so that the SDK's real `Runner` drives the client's tools (`exact_console.openai_agents`)
as it would a vendor's model.

    model = ScriptedModel("email_send", arguments, call_id="call_send_1")
    result = Runner.run_sync(Agent(name="a", model=model, tools=...), "Send it.",
                             run_config=OFFLINE)

On a task it calls its tool with its tool-call id; once its input holds that call's output it
answers with text. It keeps the input of every turn (`seen`).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

from agents import Model, ModelResponse, ModelSettings, RunConfig, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseStreamEvent
from agents.models.interface import ModelTracing
from agents.testing import assistant_message, function_call
from agents.tool import Tool

#: No traces leave the test: the SDK would export them to its vendor.
OFFLINE = RunConfig(tracing_disabled=True)
ANSWER = "The refund email is handled."


class ScriptedModel(Model):
    def __init__(self, tool: str, arguments: dict[str, Any], call_id: str) -> None:
        self.tool, self.arguments, self.call_id = tool, arguments, call_id
        self.seen: list[list[Any]] = []

    async def get_response(self, system_instructions: str | None,
                           input: str | list[TResponseInputItem],
                           model_settings: ModelSettings, tools: list[Tool],
                           output_schema: AgentOutputSchemaBase | None,
                           handoffs: list[Handoff], tracing: ModelTracing, *,
                           previous_response_id: str | None, conversation_id: str | None,
                           prompt: Any) -> ModelResponse:
        items = copy.deepcopy(list(input)) if isinstance(input, list) else [
            {"role": "user", "content": input}]
        self.seen.append(items)
        if self.outputs(items):
            output = [assistant_message(ANSWER)]
        else:
            output = [function_call(self.tool, self.arguments, call_id=self.call_id)]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, system_instructions: str | None,
                        input: str | list[TResponseInputItem], model_settings: ModelSettings,
                        tools: list[Tool], output_schema: AgentOutputSchemaBase | None,
                        handoffs: list[Handoff], tracing: ModelTracing, *,
                        previous_response_id: str | None, conversation_id: str | None,
                        prompt: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the tests run the agent unstreamed")

    def outputs(self, items: list[Any]) -> list[dict[str, Any]]:
        """The outputs of this model's tool call among `items`: what it sees of its call."""
        return [dict(i) for i in items if isinstance(i, dict)
                and i.get("type") == "function_call_output" and i.get("call_id") == self.call_id]

    def answer(self) -> str:
        """The output of its call that it was shown on its last turn."""
        [output] = self.outputs(self.seen[-1])
        return str(output["output"])
