"""Workflows with a delegated agent step (docs/design.md#delegation) and scripted sub-agents, for
the tests of bounded delegation on SQLite and PostgreSQL, in one process or across OS processes."""

from __future__ import annotations

import json
from typing import Any

from dispatch.agent import ScriptedAdapter
from dispatch.models import Delegation
from dispatch.runtime import get_runtime
from protocols.workflow import CheckedWorkflow, check_source

AGENT = "researcher"


def delegated_workflow(*, operations: str = "[crm.lookup]",
                       scope: str = "{customer: [cus-001]}", budget: int = 2,
                       expires_in: int = 600, before: str = "",
                       authority: str = "[{operations: [crm.lookup], scope: {customer: '*'}}]",
                       effects: str = "[read]") -> str:
    """A workflow whose last step runs the `researcher` sub-agent under a delegated grant;
    `before` is YAML of earlier steps (indented as steps)."""
    return f"""version: 1
name: delegated-research
effects: {effects}
authority: {authority}
steps:
{before}  - agent: {AGENT}
    input: {{question: "who is cus-001?"}}
    delegate:
      operations: {operations}
      scope: {scope}
      expires_in: {expires_in}
      budget: {budget}
    bind: answer
"""


def checked(text: str) -> CheckedWorkflow:
    result = check_source(text, get_runtime().registry, filename="delegated.yaml")
    assert isinstance(result, CheckedWorkflow), result
    return result


def lookup(customer: str = "cus-001") -> dict[str, Any]:
    return {"call": "crm.lookup", "arguments": {"customer_id": customer}}


def script(*steps: dict[str, Any], final: Any = None) -> dict[str, Any]:
    """A sub-agent script: the tool calls, then a final answer (JSON text of `final`)."""
    answer = json.dumps(final if final is not None else {"tier": "gold"})
    return {"agent": AGENT, "steps": [*steps, {"final": answer}]}


def scripted(*steps: dict[str, Any], final: Any = None) -> dict[str, ScriptedAdapter]:
    return {AGENT: ScriptedAdapter(script(*steps, final=final))}


def only_delegation() -> Delegation:
    return Delegation.objects.select_related("grant", "principal", "agent_execution").get()
