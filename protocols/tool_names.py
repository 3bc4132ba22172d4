"""A contract's tool name: what a model calls it (docs/mcp.md#names).

Model APIs take a function's name only as `^[a-zA-Z0-9_-]{1,64}$` (OpenAI's, Anthropic's and
Gemini's function calling refuse a dot), so a contract is offered as a tool under its qualified
name with each `.` replaced by `_` (`email.send` -> `email_send`); the qualified name stays the
contract's name everywhere else. The mapping must be one-to-one: two contracts (or a contract and
one of the MCP gateway's own tools) whose tool names would be equal are refused when the second
is registered, never resolved by order at call time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

__all__ = ["GATEWAY_TOOLS", "TOOL_NAME", "tool_name", "tool_name_problem"]

#: What every major model API accepts as a function's name.
TOOL_NAME: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

#: The MCP gateway's own tools, by qualified name (docs/mcp.md#tools): their tool names are
#: taken before any contract registers.
GATEWAY_TOOLS: Final = ("resource.create", "resource.revise", "proposal.status")


def tool_name(qualified: str) -> str:
    """The tool name of a qualified name: each `.` replaced by `_`."""
    return qualified.replace(".", "_")


def tool_name_problem(qualified: str, taken: Mapping[str, str]) -> str | None:
    """Why `qualified` cannot be offered as a tool, or None. `taken` maps the tool names
    already in use to the qualified names they stand for."""
    name = tool_name(qualified)
    if not TOOL_NAME.fullmatch(name):
        return (f"{qualified}: its tool name {name!r} is not one model APIs accept "
                f"(letters, digits, '_' and '-', at most 64 characters)")
    other = taken.get(name)
    if other is not None and other != qualified:
        return (f"{qualified}: its tool name {name!r} is already {other!r}'s (each '.' of a "
                "qualified name becomes '_'): rename one of the two")
    return None
