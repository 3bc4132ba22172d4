"""The embedded agent runtime (docs/design.md#tool-sets, #dispatcher, #outcomes): a model may
propose any action, but every tool call meets the same dispatcher, and recovery never asks the model
to regenerate an unfinished action.

    from dispatch.agent import ScriptedAdapter, execution_open, execution_run

    execution = execution_open(principal=agent, adapter=ScriptedAdapter(script), now=now)
    result = execution_run(execution_id=execution.id, adapter=adapter)
    result.state      # "finished" or "waiting" (for a human decision: run again later)
    result.outcomes   # ToolOutcome per call: completed / no_effect / unknown / denied(code)
"""

from __future__ import annotations

from dispatch.agent.adapters import (
    FinalAnswer,
    ModelAdapter,
    ScriptedAdapter,
    ToolCall,
    ToolSpec,
)
from dispatch.agent.loop import (
    ResumeRefusedError,
    RunResult,
    ToolOutcome,
    advertised_tools,
    execution_open,
    execution_run,
    nested_call,
)
from dispatch.selectors.executions import execution_usage
from protocols.usage import Usage

__all__ = [
    "FinalAnswer",
    "ModelAdapter",
    "ResumeRefusedError",
    "RunResult",
    "ScriptedAdapter",
    "ToolCall",
    "ToolOutcome",
    "ToolSpec",
    "Usage",
    "advertised_tools",
    "execution_open",
    "execution_run",
    "execution_usage",
    "nested_call",
]
