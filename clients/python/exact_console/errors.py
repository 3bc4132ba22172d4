"""What the client raises: a refusal, a wait that ran out, a server that could not be reached."""

from __future__ import annotations

from typing import Any

__all__ = ["Denied", "Error", "Timeout", "TransportError"]


class Error(Exception):
    """Everything the client raises derives from this."""


class Denied(Error):
    """A refusal by the console: the error envelope `{"error": {"code", "message", "details"}}`
    and its HTTP status. The code is stable and says what happened; the message says what to do.
    A refusal is the console's decision, never a network failure, and the client never sends
    the same request again after one."""

    def __init__(self, status: int, code: str, message: str,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details: dict[str, Any] = details if details is not None else {}


class Timeout(Error, TimeoutError):
    """A wait (`wait_for_decision`, `wait_for_outcome`) ran past its timeout. `last` is the
    last answer the console gave (the proposal or the operation; `{}` if none came), `code`
    what it still was: `approval_pending` for a decision not made yet, the operation's state
    for an outcome, `console_unreachable` when no answer came at all. `error` is how the last
    read failed when the console was away at the deadline (a `TransportError`, or the `Denied`
    of a 503), else None; the message says it too."""

    def __init__(self, message: str, *, code: str, last: dict[str, Any],
                 error: Error | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.last = last
        self.error = error


class TransportError(Error):
    """The console could not be reached (after the retries `Retry` allows the call), or it
    answered something that is not the API's JSON. Whether a request that was not idempotent
    had an effect is unknown: look it up (a proposal by its `call_id`, an operation by its id)
    rather than sending it again."""
