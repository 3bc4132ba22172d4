"""An agent framework's own MCP client, unmodified, against the HTTP gateway (docs/mcp.md#clients):
Pydantic AI's `MCPToolset` with the agent's bearer token, driven by a scripted model, drafts an
email and sends it; the send waits on an operator, who approves it in the console's service
while the call waits, and the one email reaches the sink.

The framework is imported inside the test: importing it costs seconds.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from demo.destinations.runner import list_all
from dispatch.models import ApprovalRequest, Proposal
from tests.api.conftest import draft_payload
from tests.mcp.conftest import Gateway, Stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.slow]

#: Long enough that the send's call is still waiting when the operator approves.
WAIT_SECONDS = "30"


@pytest.fixture
def patient_gateway(stack: Stack) -> Iterator[Gateway]:
    """A gateway whose calls wait up to `WAIT_SECONDS` for an operator."""
    # Model-safe tool names (docs/mcp.md#names), as a deployment serving model APIs sets them.
    running = Gateway(env={**stack.env, "MCP_WAIT_SECONDS": WAIT_SECONDS,
                           "MCP_TOOL_NAMES": "model"},
                      log=stack.tmp / "patient-gateway.log")
    running.start()
    try:
        yield running
    finally:
        running.stop()


class Operator(threading.Thread):
    """Approves the first pending `email.send` approval it sees, through the service, as the
    console's operator would; the approval's `dispatch_on_approval` enqueues onto the worker."""

    def __init__(self, stack: Stack, seconds: float = 60) -> None:
        super().__init__(daemon=True)
        self.stack = stack
        self.seconds = seconds
        self.granted: str | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        from dispatch.services.approvals import approval_decide

        try:
            deadline = time.monotonic() + self.seconds
            while time.monotonic() < deadline:
                approval = (ApprovalRequest.objects.select_related("proposal")
                            .filter(proposal__operation="email.send", state="pending").first())
                if approval is not None:
                    approval_decide(approver=self.stack.world.approver, approval_id=approval.id,
                                    decision="grant", digest=approval.proposal.digest,
                                    now=timezone.now())
                    self.granted = approval.proposal_id
                    return
                time.sleep(0.2)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc
        finally:
            connection.close()


def test_pydantic_ai_sends_one_email_after_an_operator_approves(
        stack: Stack, patient_gateway: Gateway) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    returns: dict[str, Any] = {}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        """The scripted model: draft, send the draft it got back, then answer in text."""
        for message in messages:
            if isinstance(message, ModelRequest):
                for part in message.parts:
                    if isinstance(part, ToolReturnPart):
                        returns[part.tool_name] = part
        if "resource_create" not in returns:
            return ModelResponse(parts=[ToolCallPart("resource_create", {
                "kind": "email_draft", "payload": draft_payload()})])
        if "email_send" not in returns:
            draft = returns["resource_create"].content
            return ModelResponse(parts=[ToolCallPart("email_send", {
                "draft": {"id": draft["id"], "revision": draft["revision"]}})])
        return ModelResponse(parts=[TextPart("The refund email is sent.")])

    console = MCPToolset(patient_gateway.url,
                         headers={"Authorization": f"Bearer {stack.world.owner_token}"})
    agent = Agent(FunctionModel(model), toolsets=[console])
    operator = Operator(stack)
    operator.start()
    started = time.monotonic()
    try:
        run = agent.run_sync("Tell customer@example.com that their order was refunded.")
    finally:
        operator.join(timeout=70)
    elapsed = time.monotonic() - started

    assert operator.error is None, operator.error
    assert operator.granted is not None, "no email.send approval was ever pending"
    assert run.output == "The refund email is sent."
    sent = returns["email_send"]
    seen = sent.model_response_str()
    assert '"state":"completed"' in seen.replace(" ", ""), seen
    answer = sent.content if isinstance(sent.content, dict) else json.loads(seen)
    assert answer["proposal_id"] == operator.granted
    assert answer["operation"]["state"] == "completed"
    assert len(list_all(stack.destinations.directory)["email"]) == 1
    proposal = Proposal.objects.get(id=operator.granted)
    assert proposal.channel == "mcp"
    assert proposal.client  # the framework's client names itself
    assert elapsed < float(WAIT_SECONDS)  # answered from the approval, not the wait's end
