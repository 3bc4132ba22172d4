"""One tool call of an agent framework, made against the console: the part every adapter
(`exact_console.langchain`, `exact_console.pydantic_ai`, ...) shares, framework-neutral, and
public for adapters of other frameworks (clients/python/README.md, "An adapter for another
framework").

A call proposes the model's exact arguments with `call_id` = the framework's tool-call id and
`dispatch_on_approval`, waits for the human's decision and the operation's outcome within one
timeout, and ends in an `Answer`: the operation's result, or the code and message of a refusal,
of a wait past the timeout, or of a console that could not be reached (`console_unreachable`).
It never raises those and never proposes twice.

Each step is written once, as a generator of the client calls it makes (`Ask`), and run by
`drive` on a `Client` or by `adrive` on an `AsyncClient`: the sync functions (`call`, `begin`,
`answer`) take a `Client`; their async twins (`acall`, `abegin`, `aanswer`) take either, a sync
`Client` on a thread of its own, never on asyncio's default executor.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from exact_console._blocking import in_thread
from exact_console._calls import API_PREFIX, decided
from exact_console.client import AsyncClient, Client
from exact_console.errors import Denied, Error, Timeout, TransportError
from exact_console.tools import Tool

__all__ = [
    "DONE",
    "UNREACHABLE",
    "Answer",
    "aanswer",
    "abegin",
    "acall",
    "answer",
    "approval_url",
    "begin",
    "call",
    "tool_name",
]

#: The operation states in which the effect happened: the call answers the result.
DONE = frozenset({"completed", "reconciled_completed"})
#: The code of an answer when the console could not be reached (after the client's retries).
UNREACHABLE = "console_unreachable"

T = TypeVar("T")
AnyClient = Client | AsyncClient


@dataclass(frozen=True)
class Answer:
    """What the model is told. `code` is None for a result (`text` is the operation's result as
    JSON, `operation` the settled operation); otherwise it is the refusal's code
    (`approval_denied`, `scope_violation`, ...), `approval_pending` for a wait past the timeout,
    `console_unreachable` for a console that could not be reached, or the state an operation
    ended in without its effect, and `text` is `"<code>: <message>"`."""

    text: str
    code: str | None = None
    details: Any = None
    operation: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.code is None


@dataclass(frozen=True)
class Ask:
    """One call of a client's, by its method's name: what a step asks `drive` to make."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


#: A step: yields the calls it makes, is sent their answers (or thrown their errors), and
#: returns its value.
Steps = Generator[Ask, Any, T]


class _Run(Generic[T]):
    """`steps` run by a driver: `next()` is the next call to make (None once they returned
    `value`), and `reply` or `fail` tells them how it went."""

    def __init__(self, steps: Steps[T]) -> None:
        self.steps = steps
        self.sent: tuple[Any, Error | None] = (None, None)
        self.value: T

    def next(self) -> Ask | None:
        reply, error = self.sent
        try:
            return self.steps.send(reply) if error is None else self.steps.throw(error)
        except StopIteration as stop:
            self.value = stop.value
            return None

    def reply(self, value: Any) -> None:
        self.sent = (value, None)

    def fail(self, error: Error) -> None:
        self.sent = (None, error)


def drive(client: Client, steps: Steps[T]) -> T:
    """Runs `steps` on a sync client."""
    if not isinstance(client, Client):
        raise TypeError(_sync_only(client))
    run = _Run(steps)
    while (ask := run.next()) is not None:
        try:
            run.reply(getattr(client, ask.method)(*ask.args, **ask.kwargs))
        except Error as failed:
            run.fail(failed)
    return run.value


async def adrive(client: AnyClient, steps: Steps[T]) -> T:
    """Runs `steps` on an async client, or on a sync one on a thread of its own."""
    if isinstance(client, Client):
        return await in_thread(drive, client, steps)
    run = _Run(steps)
    while (ask := run.next()) is not None:
        try:
            run.reply(await getattr(client, ask.method)(*ask.args, **ask.kwargs))
        except Error as failed:
            run.fail(failed)
    return run.value


def _sync_only(client: object) -> str:
    if isinstance(client, AsyncClient):
        return ("this is the sync path, and the client is an AsyncClient: await the async "
                "one (acall, abegin, aanswer; a LangChain tool's ainvoke), or pass a Client")
    return f"a Client or an AsyncClient, not {type(client).__name__}"


def tool_name(spec: Tool) -> str:
    """The tool's name for a model: the contract's, `.` replaced by `_` (`crm_lookup`), since
    model APIs take only letters, digits, `_` and `-`."""
    return spec.name.replace(".", "_")


# --- the steps ------------------------------------------------------------------------------

def begin_steps(operation: str, arguments: dict[str, Any],
                call_id: str) -> Steps[dict[str, Any] | Answer]:
    try:
        proposal: dict[str, Any] = yield Ask("propose", (operation, arguments), {
            "call_id": call_id, "dispatch_on_approval": True})
    except Denied as refusal:
        return refused(refusal)
    except TransportError as failure:
        return unreachable(failure)
    return proposal


def settle_steps(proposal: Mapping[str, Any], *, timeout: float) -> Steps[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    if not decided(proposal):
        proposal = yield Ask("wait_for_decision", (proposal["id"],),
                             {"timeout": _left(deadline)})
    operation_id = proposal.get("operation_id")
    if operation_id is None:
        # Needs no approval, or the grant's claim has not been made: dispatching is the
        # console's answer either way (a denied, expired or revoked approval is refused with
        # its code).
        try:
            operation_id = (yield Ask("dispatch", (proposal["id"],)))["operation_id"]
        except Denied as refusal:
            if refusal.code != "permit_claimed":
                raise
            # The grant claimed it between the read and the dispatch.
            operation_id = (yield Ask("proposal", (proposal["id"],))).get("operation_id")
            if operation_id is None:
                raise
    operation: dict[str, Any] = yield Ask("wait_for_outcome", (str(operation_id),),
                                          {"timeout": _left(deadline)})
    return operation


def answer_steps(proposal: Mapping[str, Any], *, timeout: float) -> Steps[Answer]:
    try:
        return answered((yield from settle_steps(proposal, timeout=timeout)))
    except Denied as refusal:
        return refused(refusal)
    except Timeout as waited:
        return Answer(f"{waited.code}: {waited}", waited.code, waited.last)
    except TransportError as failure:
        return unreachable(failure)


def call_steps(operation: str, arguments: dict[str, Any], call_id: str, *,
               timeout: float) -> Steps[Answer]:
    deadline = time.monotonic() + timeout
    begun = yield from begin_steps(operation, arguments, call_id)
    if isinstance(begun, Answer):
        return begun
    return (yield from answer_steps(begun, timeout=_left(deadline)))


def read_steps(proposal_id: str) -> Steps[dict[str, Any] | Answer]:
    """The proposal read again, or the `Answer` of its refusal or of an unreachable console."""
    try:
        proposal: dict[str, Any] = yield Ask("proposal", (proposal_id,))
    except Denied as refusal:
        return refused(refusal)
    except TransportError as failure:
        return unreachable(failure)
    return proposal


# --- the sync functions, and their async twins ----------------------------------------------

def begin(client: Client, operation: str, arguments: dict[str, Any],
          call_id: str) -> dict[str, Any] | Answer:
    """The proposal of this tool call, made or found again by its call id; or the `Answer` of
    its refusal, or of a console that could not be reached."""
    return drive(client, begin_steps(operation, arguments, call_id))


async def abegin(client: AnyClient, operation: str, arguments: dict[str, Any],
                 call_id: str) -> dict[str, Any] | Answer:
    return await adrive(client, begin_steps(operation, arguments, call_id))


def settle(client: Client, proposal: Mapping[str, Any], *, timeout: float) -> dict[str, Any]:
    """The settled operation of a proposal: decided, dispatched and waited for, all within
    `timeout`. Raises `Denied` for a refusal, `Timeout` past the timeout and `TransportError`
    for a console that could not be reached."""
    return drive(client, settle_steps(proposal, timeout=timeout))


def answer(client: Client, proposal: Mapping[str, Any], *, timeout: float) -> Answer:
    """`settle`, told as an `Answer`."""
    return drive(client, answer_steps(proposal, timeout=timeout))


async def aanswer(client: AnyClient, proposal: Mapping[str, Any], *, timeout: float) -> Answer:
    return await adrive(client, answer_steps(proposal, timeout=timeout))


def call(client: Client, operation: str, arguments: dict[str, Any], call_id: str, *,
         timeout: float) -> Answer:
    """One tool call, from its proposal to its answer (see the module)."""
    return drive(client, call_steps(operation, arguments, call_id, timeout=timeout))


async def acall(client: AnyClient, operation: str, arguments: dict[str, Any], call_id: str,
                *, timeout: float) -> Answer:
    """`call` for async code: an `AsyncClient`, or a `Client` on a thread of its own."""
    return await adrive(client, call_steps(operation, arguments, call_id, timeout=timeout))


# --- answers ----------------------------------------------------------------------------------

def answered(operation: dict[str, Any]) -> Answer:
    state = str(operation["state"])
    if state not in DONE:
        return Answer(f"{state}: {_ended(operation)}", state, operation, operation)
    return Answer(json.dumps(operation.get("result"), sort_keys=True), operation=operation)


def refused(refusal: Denied) -> Answer:
    return Answer(f"{refusal.code}: {refusal.message}", refusal.code, refusal.details)


def unreachable(failure: TransportError) -> Answer:
    """The console could not be reached, after the client's retries: told to the model as the
    other errors are. Calling the tool again with the same id finds the first proposal."""
    return Answer(f"{UNREACHABLE}: {failure}", UNREACHABLE, {})


def approval_url(client: AnyClient, proposal: Mapping[str, Any]) -> str | None:
    """The console's page where a human decides the proposal's approval, if it has one: the
    console's own link at its public address (`approval.url`, from `CONSOLE_PUBLIC_URL`), or,
    when the deployment has not set one, the page at the address this client calls."""
    approval = proposal.get("approval")
    if not isinstance(approval, dict) or not approval.get("id"):
        return None
    public = approval.get("url")
    if isinstance(public, str) and public:
        return public
    return client.root.removesuffix(API_PREFIX) + f"/console/approvals/{approval['id']}/"


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _ended(operation: dict[str, Any]) -> str:
    attempts = operation.get("attempts") or []
    error = attempts[-1].get("error") if attempts else None
    why = f" ({error})" if error else ""
    return f"operation {operation.get('id')} ended {operation.get('state')}{why}"
