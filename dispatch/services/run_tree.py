"""The tree of a run (docs/design.md#run-trees): one place that reads an execution's path.

Executions form a tree: a workflow run is a root; an undelegated `agent` step's loop and a
delegated step's sub-agent are its children (`Execution.parent`, with `root` the run). A
proposal, a claim and an attempt of any execution in the tree are bound by the whole path to
the root, never by their own execution alone:

- **Stops.** An execution on the path that timed out or was cancelled refuses the action
  (`protocol_state_invalid`, naming it): `path_stop_refusal`.
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

from dispatch.models import Execution
from protocols.denials import Denial, DenialCode
from protocols.grants import ANY
from protocols.jsontypes import JSONValue
from protocols.lifecycle_runs import EXECUTION_STOPPED

#: How deep a tree may be read: a run, an agent step's loop or a sub-agent, and a guard.
MAX_DEPTH = 8


@dataclass(frozen=True)
class Node:
    """One execution on a path: its id, state, parent and declared authority."""

    id: str
    state: str
    parent_id: str | None
    authority: JSONValue


def execution_path(execution_id: str, *, lock: bool = False) -> list[Node]:
    """The execution and its ancestors, itself first, the root last; empty when it does not
    exist (an agent may name an execution id of its own that no run has). `lock=True` inside a
    claim's transaction: each row is share-locked on PostgreSQL (on SQLite the transaction holds
    the write lock since BEGIN IMMEDIATE), so a stop that committed first is seen and one that
    comes after waits for the claim."""
    path: list[Node] = []
    next_id: str | None = execution_id
    while next_id is not None and len(path) < MAX_DEPTH:
        rows = Execution.objects.filter(id=next_id)
        if lock:
            rows = rows.select_for_update(no_key=True) if _postgres() else rows
        found = rows.values_list("id", "state", "parent_id", "authority").first()
        if found is None:
            break
        node = Node(*found)
        path.append(node)
        next_id = node.parent_id
    return path


def _postgres() -> bool:
    from django.db import connection
    return connection.vendor == "postgresql"


def path_stop_refusal(path: list[Node], *, action: str = "its actions do not run") -> Denial | None:
    """`protocol_state_invalid` naming the first execution on the path that timed out or was
    cancelled; None while none has."""
    for node in path:
        if node.state in EXECUTION_STOPPED:
            which = "The run" if node.parent_id is None else "An enclosing execution"
            return Denial(DenialCode.PROTOCOL_STATE_INVALID,
                          f"{which} has ended ({node.state}); {action}.",
                          execution_id=node.id)
    return None


def path_authority_refusal(path: list[Node], operation: str,
                           selected: Mapping[str, str]) -> Denial | None:
    """`scope_violation` when an execution on the path declares authority that does not cover
    `operation` with the `selected` authority values; None when every declaration covers it."""
    for node in path:
        if node.authority is None:
            continue
        if not any(_covers(entry, operation, selected) for entry in _entries(node.authority)):
            return Denial(DenialCode.SCOPE_VIOLATION,
                          f"{operation} with {dict(selected)} is outside the authority that "
                          f"execution {node.id} declares; declare it under `authority:`.",
                          selected=dict(selected), execution_id=node.id)
    return None


def _entries(authority: JSONValue) -> list[Mapping[str, JSONValue]]:
    return [e for e in authority if isinstance(e, Mapping)] if isinstance(authority, list) \
        else []


def _covers(entry: Mapping[str, JSONValue], operation: str,
            selected: Mapping[str, str]) -> bool:
    operations = entry.get("operations")
    names = set(operations) if isinstance(operations, list) else set()
    if ANY not in names and operation not in names:
        return False
    scope = entry.get("scope")
    scope = scope if isinstance(scope, Mapping) else {}
    for key, value in selected.items():
        allowed = scope.get(key)
        if allowed is None:
            return False
        if allowed != ANY and (not isinstance(allowed, list) or value not in allowed):
            return False
    return True


def tree_of(root_id: str) -> list[str]:
    """The execution and every execution below it, parents before their children."""
    tree = [root_id]
    frontier = [root_id]
    for _ in range(MAX_DEPTH):
        frontier = list(Execution.objects.filter(parent_id__in=frontier)
                        .order_by("created_at", "id").values_list("id", flat=True))
        if not frontier:
            break
        tree.extend(frontier)
    return tree
