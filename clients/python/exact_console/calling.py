"""One tool call of an agent framework, made against the console: the part every adapter
(`exact_console.langchain`, `exact_console.pydantic_ai`, ...) shares, framework-neutral, and
public for adapters of other frameworks (clients/python/README.md, "An adapter for another
framework").

A call proposes the model's exact arguments with `call_id` = the framework's tool-call id and
`dispatch_on_approval`, waits for the human's decision and the operation's outcome within one
timeout, and ends in an `Answer`: the operation's result, or the code and message of a refusal or
of a wait past the timeout. It never raises those and never proposes twice.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from exact_console._calls import API_PREFIX, decided
from exact_console.client import Client
from exact_console.errors import Denied, Timeout
from exact_console.tools import Tool

#: The operation states in which the effect happened: the call answers the result.
DONE = frozenset({"completed", "reconciled_completed"})


@dataclass(frozen=True)
class Answer:
    """What the model is told. `code` is None for a result (`text` is the operation's result as
    JSON, `operation` the settled operation); otherwise it is the refusal's code
    (`approval_denied`, `scope_violation`, ...), `approval_pending` for a wait past the timeout,
    or the state an operation ended in without its effect, and `text` is `"<code>: <message>"`."""

    text: str
    code: str | None = None
    details: Any = None
    operation: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.code is None


def tool_name(spec: Tool) -> str:
    """The tool's name for a model: the contract's, `.` replaced by `_` (`crm_lookup`), since
    model APIs take only letters, digits, `_` and `-`."""
    return spec.name.replace(".", "_")


def begin(client: Client, operation: str, arguments: dict[str, Any],
          call_id: str) -> dict[str, Any] | Answer:
    """The proposal of this tool call, made or found again by its call id; or the `Answer` of
    its refusal."""
    try:
        return client.propose(operation, arguments, call_id=call_id, dispatch_on_approval=True)
    except Denied as refusal:
        return refused(refusal)


def settle(client: Client, proposal: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    """The settled operation of a proposal: decided, dispatched and waited for, all within
    `timeout`. Raises `Denied` for a refusal and `Timeout` past the timeout."""
    deadline = time.monotonic() + timeout
    if not decided(proposal):
        proposal = client.wait_for_decision(proposal["id"], timeout=_left(deadline))
    operation_id = proposal.get("operation_id")
    if operation_id is None:
        # Needs no approval, or the grant's claim has not been made: dispatching is the
        # console's answer either way (a denied, expired or revoked approval is refused with
        # its code).
        try:
            operation_id = client.dispatch(proposal["id"])["operation_id"]
        except Denied as refusal:
            if refusal.code != "permit_claimed":
                raise
            # The grant claimed it between the read and the dispatch.
            operation_id = client.proposal(proposal["id"]).get("operation_id")
            if operation_id is None:
                raise
    return client.wait_for_outcome(str(operation_id), timeout=_left(deadline))


def answer(client: Client, proposal: dict[str, Any], *, timeout: float) -> Answer:
    """`settle`, told as an `Answer`."""
    try:
        return answered(settle(client, proposal, timeout=timeout))
    except Denied as refusal:
        return refused(refusal)
    except Timeout as waited:
        return Answer(f"{waited.code}: {waited}", waited.code, waited.last)


def call(client: Client, operation: str, arguments: dict[str, Any], call_id: str, *,
         timeout: float) -> Answer:
    """One tool call, from its proposal to its answer (see the module)."""
    deadline = time.monotonic() + timeout
    begun = begin(client, operation, arguments, call_id)
    if isinstance(begun, Answer):
        return begun
    return answer(client, begun, timeout=_left(deadline))


def answered(operation: dict[str, Any]) -> Answer:
    state = str(operation["state"])
    if state not in DONE:
        return Answer(f"{state}: {_ended(operation)}", state, operation, operation)
    return Answer(json.dumps(operation.get("result"), sort_keys=True), operation=operation)


def refused(refusal: Denied) -> Answer:
    return Answer(f"{refusal.code}: {refusal.message}", refusal.code, refusal.details)


def approval_url(client: Client, proposal: dict[str, Any]) -> str | None:
    """The console's page where a human decides the proposal's approval, if it has one."""
    approval = proposal.get("approval")
    if not isinstance(approval, dict) or not approval.get("id"):
        return None
    return client.root.removesuffix(API_PREFIX) + f"/console/approvals/{approval['id']}/"


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _ended(operation: dict[str, Any]) -> str:
    attempts = operation.get("attempts") or []
    error = attempts[-1].get("error") if attempts else None
    why = f" ({error})" if error else ""
    return f"operation {operation.get('id')} ended {operation.get('state')}{why}"
