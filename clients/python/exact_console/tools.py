"""Framework-neutral tool specs, one per contract the agent may propose (`GET
contracts/?permitted=true`: its tool set, what the MCP gateway lists too).

An agent framework's adapter turns each into its own kind of tool; calling the tool proposes
the action, and the effect runs in the console's handler behind its dispatcher, never in the
agent's process.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from exact_console._blocking import in_thread
from exact_console.client import AsyncClient, Client

__all__ = ["Tool", "atools", "tools"]


@dataclass(frozen=True)
class Tool:
    """One contract as a tool: `name` is its qualified name (`email.send`), `input_schema` the
    JSON schema of its arguments, `needs_approval` whether a human must grant each call before
    it runs. `contract` is the whole contract as the console described it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    needs_approval: bool
    contract: dict[str, Any] = field(repr=False, compare=False)


def describe(contract: Mapping[str, Any]) -> str:
    """What the model reads: the contract, its effects, and the approval it needs."""
    effects = ", ".join(contract.get("effects") or []) or "none"
    approval = contract.get("approval")
    if approval is None:
        how = "Runs without an approval."
    else:
        how = (f"Needs an operator's approval (role {approval.get('role')}) of these exact "
               "arguments before it runs. Nothing you write in the arguments can approve it.")
    return (f"{contract['name']} (contract v{contract.get('version')}). "
            f"Effects: {effects}. {how}")


def tool(contract: Mapping[str, Any]) -> Tool:
    return Tool(name=str(contract["name"]), description=describe(contract),
                input_schema=dict(contract.get("input_schema") or {}),
                needs_approval=contract.get("approval") is not None,
                contract=dict(contract))


def tools(source: Client | AsyncClient | Mapping[str, Any],
          operations: Iterable[str] | None = None) -> list[Tool]:
    """The tools of `client.contracts(permitted=True)`: the contracts this agent may propose
    (its tool set), in the console's order; when `operations` names some, those of all the
    console's contracts (`GET contracts/`, docs/frameworks.md), whether or not the agent may
    propose them: the dispatcher refuses what it may not (`tool_not_permitted`), and a name the
    console does not list is a `ValueError`. `source` may also be a contracts
    answer already fetched, e.g. `await async_client.contracts(permitted=True)`; an
    `AsyncClient` itself is a `TypeError` saying to `await atools(async_client)`."""
    if isinstance(source, AsyncClient):
        raise TypeError("an AsyncClient's contracts are awaited: `await atools(client)` (or "
                        "`await exact_console.<adapter>.atools(client)` for an adapter's tools)")
    return _of(source.contracts(permitted=operations is None) if isinstance(source, Client)
               else source, operations)


async def atools(source: Client | AsyncClient | Mapping[str, Any],
                 operations: Iterable[str] | None = None) -> list[Tool]:
    """`tools` for async code: an `AsyncClient`'s contracts awaited (a `Client`'s read on a
    thread of its own)."""
    if isinstance(source, AsyncClient):
        return _of(await source.contracts(permitted=operations is None), operations)
    if isinstance(source, Client):
        return _of(await in_thread(source.contracts, permitted=operations is None), operations)
    return _of(source, operations)


def _of(answer: Mapping[str, Any], operations: Iterable[str] | None) -> list[Tool]:
    found = [tool(contract) for contract in answer["results"]]
    if operations is None:
        return found
    wanted = list(operations)
    missing = sorted(set(wanted) - {t.name for t in found})
    if missing:
        raise ValueError(f"no contract named {', '.join(missing)} among the console's contracts")
    return [t for t in found if t.name in wanted]
