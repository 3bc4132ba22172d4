"""The tree of a run (docs/design.md#run-trees): one place that reads an execution's path.

Executions form a tree: a workflow run is a root; an undelegated `agent` step's loop and a
delegated step's sub-agent are its children (`Execution.parent`, with `root` the run). A
proposal, a claim and an attempt of any execution in the tree are bound by the whole path to
the root, never by their own execution alone:

- **Stops.** An execution on the path that timed out or was cancelled, or whose deadline has
  passed (before the sweep times it out), refuses the action (`protocol_state_invalid`, naming
  it): `path_stop_refusal`.
- **Authority.** The authority in force is the intersection of the principal's grants
  (`dispatch.services.authority`) and the authority each execution on the path declares
  (`Execution.authority`, a workflow's `authority:`): `path_authority_refusal`.
- **Ceilings.** What an action spends is charged to the nearest open scope on the path
  (`dispatch.services.ceilings.execution_scope_take`); what is in flight is counted over the
  whole tree of its root.

Ending a run ends its whole tree (`dispatch.services.run_stops`): `tree_of` lists it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dispatch.models import Execution
from dispatch.store import executions
from dispatch.store.sql import is_postgres
from protocols.denials import Denial, DenialCode
from protocols.grants import parse_scope
from protocols.jsontypes import JSONValue
from protocols.lifecycle_runs import EXECUTION_STOPPED
from protocols.workflow.authority import covers

#: How deep a tree may be: a run, an agent step's loop or a sub-agent, and room to spare. A
#: deeper path is refused, never read in part (a check that stopped reading would fail open).
MAX_DEPTH = 8


@dataclass(frozen=True)
class Node:
    """One execution on a path: its id, state, principal, parent, declared authority and
    deadline."""

    id: str
    state: str
    principal_id: str
    parent_id: str | None
    authority: JSONValue
    deadline_at: datetime | None


def execution_path(execution_id: str, *, lock: bool = False) -> list[Node]:
    """The execution and its ancestors, itself first, the root last; empty when it does not
    exist (an agent may name an execution id of its own that no run has). `lock=True` inside a
    claim's or an attempt's transaction: each row is share-locked
    (`dispatch.store.executions.node_shared`, PostgreSQL; SQLite's transaction holds the write
    lock since BEGIN IMMEDIATE)."""
    path: list[Node] = []
    next_id: str | None = execution_id
    while next_id is not None:
        if len(path) == MAX_DEPTH:
            raise RuntimeError(f"execution {execution_id} is nested deeper than {MAX_DEPTH}")
        if lock and is_postgres():
            row: tuple[Any, ...] | None = executions.node_shared(id=next_id)
        else:
            row = Execution.objects.filter(id=next_id).values_list(
                "id", "state", "principal_id", "parent_id", "authority", "deadline_at").first()
        if row is None:
            break
        node = Node(*row)
        path.append(node)
        next_id = node.parent_id
    return path


def path_stop_refusal(path: list[Node], *, now: datetime,
                      action: str = "its actions do not run") -> Denial | None:
    """`protocol_state_invalid` naming the first execution on the path that timed out or was
    cancelled, or whose deadline has passed by `now` (the sweep has not timed it out yet); None
    while none has. The one place that decides this refusal for an execution's actions (the
    interpreter's step boundary stops the run's own steps)."""
    for node in path:
        which = "The run" if node.parent_id is None else "An enclosing execution"
        if node.state in EXECUTION_STOPPED:
            return Denial(DenialCode.PROTOCOL_STATE_INVALID,
                          f"{which} has ended ({node.state}); {action}.",
                          execution_id=node.id)
        if node.deadline_at is not None and node.deadline_at <= now:
            return Denial(DenialCode.PROTOCOL_STATE_INVALID,
                          f"{which} passed its deadline at {node.deadline_at.isoformat()}; "
                          f"{action}.", execution_id=node.id, state="timed_out")
    return None


def path_authority_refusal(path: list[Node], operation: str,
                           selected: Mapping[str, str]) -> Denial | None:
    """`scope_violation` when an execution on the path declares authority that does not cover
    `operation` with the `selected` authority values; None when every declaration covers it."""
    for node in path:
        if node.authority is None:
            continue
        if not any(covers(set(entry["operations"]), parse_scope(entry["scope"]), operation,
                          selected) for entry in _entries(node.authority)):
            return Denial(DenialCode.SCOPE_VIOLATION,
                          f"{operation} with {dict(selected)} is outside the authority that "
                          f"execution {node.id} declares; declare it under `authority:`.",
                          selected=dict(selected), execution_id=node.id)
    return None


def _entries(authority: JSONValue) -> list[Mapping[str, JSONValue]]:
    """The declaration's entries; one this runtime did not write refuses everything."""
    if not isinstance(authority, list):
        return []
    return [e for e in authority if isinstance(e, Mapping)
            and isinstance(e.get("operations"), list) and isinstance(e.get("scope"), Mapping)]


def tree_of(root_id: str) -> list[str]:
    """The execution and every execution below it, parents before their children."""
    tree = [root_id]
    frontier = [root_id]
    for _ in range(MAX_DEPTH):
        frontier = list(Execution.objects.filter(parent_id__in=frontier)
                        .order_by("created_at", "id").values_list("id", flat=True))
        if not frontier:
            return tree
        tree.extend(frontier)
    raise RuntimeError(f"the tree of execution {root_id} is deeper than {MAX_DEPTH}")


def principal_path(execution_id: object, principal_id: str, *,
                   lock: bool = False) -> list[Node]:
    """The path of `execution_id` when it is `principal_id`'s own execution (an agent step's
    loop or a sub-agent is its principal's); empty otherwise. An execution id is the caller's
    word (docs/rest-api.md#calls): naming another principal's run, or another tenant's, joins
    none of its tree, budget or stop, and answers exactly as a fresh id does."""
    if not isinstance(execution_id, str) or not execution_id:
        return []
    path = execution_path(execution_id, lock=lock)
    return path if path and path[0].principal_id == principal_id else []


def execution_stopped(execution_id: str | None, principal_id: str, *, now: datetime,
                      lock: bool = False) -> Denial | None:
    """The refusal of an action of `principal_id` in `execution_id` whose path to its root holds
    a run that timed out, was cancelled or passed its deadline by `now` (`path_stop_refusal`);
    None outside a run or while none has."""
    return path_stop_refusal(principal_path(execution_id, principal_id, lock=lock), now=now)
