"""The handler port and the context only the dispatcher gives a handler (docs/design.md#dispatcher).

Handlers are registered by extensions (`settings.DISPATCH_EXTENSIONS`, each a module declaring
`EXTENSION_API` with a `register(runtime)` function); the runtime itself ships none. This port is
part of extension API version 1 (docs/compatibility.md). A handler and the destination
clients it uses report a failure as exactly one of `DefiniteFailure` (certainly no effect) or
`UncertainOutcome` (maybe an effect); a read-only lookup that gets no usable answer raises
`LookupFailedError`.

A protected handler runs only through the dispatcher's invoke path
(`dispatch.services.worker.handler_invoke`), which first checks in the store that its
operation holds a committed claim and that this exact attempt was started and has not ended;
otherwise it raises `UnclaimedInvocationError` before any I/O.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import importlib
import inspect
import itertools
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, Protocol, TypeVar

from protocols.canonical import digest
from protocols.jsontypes import JSONObject

__all__ = [
    "Cancellation",
    "DefiniteFailure",
    "DestinationError",
    "FromCode",
    "Handler",
    "HandlerContext",
    "LookupFailedError",
    "LookupResult",
    "UncertainOutcome",
    "UnclaimedInvocationError",
    "code_fingerprint",
    "within_deadline",
]

T = TypeVar("T")


class DestinationError(Exception):
    """Root of what a handler or destination client reports instead of a result; ``reason``
    is a human-readable explanation.

    The dispatcher's safety rests on one distinction: whether the destination *certainly* did
    not perform the effect, or *may* have. Every failure is exactly one of the two subclasses.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class DefiniteFailure(DestinationError):
    """The destination certainly did not perform the effect; nothing needs reconciling."""


class UncertainOutcome(DestinationError):
    """The destination may have performed the effect; only a lookup can settle it.
    `retry_after`: seconds the destination asked to wait before trying again (its
    `Retry-After`), which a retry under the same key honours (`protocols.backoff`)."""

    def __init__(self, reason: str, *, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


class LookupFailedError(DestinationError):
    """A read-only lookup got no usable answer; it proves nothing either way."""


class UnclaimedInvocationError(RuntimeError):
    """A protected handler was called without a started attempt of a claimed operation."""


class Cancellation:
    """Set when the action is cancelled while its attempt runs (docs/design.md#cancellation).

    `is_set()` also asks the store through `probe` (at most every `interval` seconds), so a
    handler that checks right before its effect sees a cancellation committed by any process.
    A handler that honours it raises `DefiniteFailure` before the effect: the outcome is then
    `failed_no_effect`; after the effect it reports what happened, as always.
    """

    def __init__(self, probe: Callable[[], bool] | None = None, interval: float = 0.1) -> None:
        self._event = threading.Event()
        self._probe = probe
        self._interval = interval
        self._asked_at = -math.inf

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        if self._event.is_set():
            return True
        if self._probe is not None and time.monotonic() - self._asked_at >= self._interval:
            self._asked_at = time.monotonic()
            if self._probe():
                self._event.set()
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a cancellation; True if it came."""
        deadline = time.monotonic() + timeout
        while not self.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._event.wait(min(remaining, self._interval))
        return True


@dataclass(frozen=True)
class HandlerContext:
    operation_id: str  # also the destination's idempotency key
    attempt: int
    snapshot: JSONObject  # the authorized canonical snapshot, exactly as approved
    timeout: float
    principal_id: str = ""  # the requesting principal: nested calls run under its authority
    execution_id: str = ""
    nested_calls: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    cancelled: Cancellation = field(default_factory=Cancellation)
    # time.monotonic() by which the whole call must have answered: the contract timeout.
    deadline: float = math.inf
    # The attempt's signed permit token (docs/permit-tokens.md), for the handler to carry to the
    # destination; empty when the dispatcher minted none (a handler called outside a worker).
    permit_token: str = ""

    @property
    def arguments(self) -> JSONObject:
        return dict(self.snapshot["arguments"])

    @property
    def destination(self) -> JSONObject:
        """The destination of the approved snapshot: where this attempt must send."""
        return dict(self.snapshot["destination"])

    def remaining(self) -> float:
        return self.deadline - time.monotonic()


#: How often a call in flight looks at its context's cancellation (seconds).
_CANCEL_POLL = 0.1


def within_deadline(ctx: HandlerContext, call: Callable[[], T]) -> T:
    """Run one destination call so that the handler answers by the contract timeout, however
    slowly the destination drips its reply (a timeout bounds each socket wait, not the call).

    Past the deadline, or cancelled through `ctx.cancelled` while the call is in flight, the
    request may have been sent: `UncertainOutcome`, never no effect.
    The abandoned call runs on in a daemon thread until its own socket timeouts end it.
    """
    remaining = ctx.remaining()
    if remaining <= 0:
        raise DefiniteFailure("no time left before the contract timeout; nothing was sent")
    if math.isinf(remaining):
        return call()
    answer: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            answer.append(call())
        except BaseException as exc:  # handed to the caller's thread below
            error.append(exc)

    # In the caller's context: the call's log lines keep the action's ids, and its request the
    # attempt's trace (docs/design.md#tracing).
    worker = threading.Thread(target=contextvars.copy_context().run, args=(run,),
                              name=f"call-{ctx.operation_id}", daemon=True)
    worker.start()
    until = time.monotonic() + remaining
    while worker.is_alive() and time.monotonic() < until:
        worker.join(min(_CANCEL_POLL, max(0.0, until - time.monotonic())))
        if worker.is_alive() and ctx.cancelled.is_set():
            # Cancelled through its context (an operator, the run's deadline): the caller
            # stops waiting, but the request is out, so the effect may have happened.
            raise UncertainOutcome("cancelled while the call was in flight; the request may "
                                   "have been received")
    if worker.is_alive():
        raise UncertainOutcome(f"no answer within the contract timeout of {ctx.timeout:g}s; "
                               "the request may have been received")
    if error:
        raise error[0]
    return answer[0]


def code_fingerprint(cls: type, modules: tuple[str, ...] = ()) -> str:
    """The implementation fingerprint of a handler class, derived from its code
    (docs/design.md#outcomes, #extensions): the digest of its qualified name and of the source of
    every module that defines a class it inherits from (this port module aside), and of the named
    `modules` it relies on (its destination client, where what counts as no effect is decided). Any
    edit of that code, a helper function beside the handler included, is a new fingerprint, so a
    proposal approved under the old code is refused (`contract_mismatch`) rather than run by the
    new. Each module's source is read once per process, when first fingerprinted."""
    return _code_fingerprint(cls, modules)


@functools.cache
def _code_fingerprint(cls: type, extra: tuple[str, ...]) -> str:
    names = [base.__module__ for base in cls.__mro__ if base.__module__ not in (
        __name__, "builtins", "typing", "abc")]
    modules = {name: _module_digest(name) for name in [*names, *extra]}
    return digest({"handler": f"{cls.__module__}.{cls.__qualname__}", "modules": modules})


@functools.cache
def _module_digest(name: str) -> str:
    module = sys.modules.get(name) or importlib.import_module(name)
    path = inspect.getsourcefile(module)
    if path is None:
        raise ValueError(f"module {name} has no source to fingerprint")
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class FromCode:
    """`implementation_fingerprint = FromCode("pkg.client", ...)` on a handler class: the
    fingerprint is `code_fingerprint` of the class it is read from (a subclass gets its own)
    and of the named modules, never a hand-written label. The defining class's code is read
    when the class is created, at import: the fingerprint is that of the code this process
    runs, not of a file edited since."""

    def __init__(self, *modules: str) -> None:
        self.modules = modules

    def __set_name__(self, owner: type, name: str) -> None:
        code_fingerprint(owner, self.modules)

    def __get__(self, instance: object, owner: type) -> str:
        return code_fingerprint(owner, self.modules)


@dataclass(frozen=True)
class LookupResult:
    found: Literal["present", "absent", "unknown"]
    evidence: str


class Handler(Protocol):
    """The handler port (docs/design.md#dispatcher): what a trusted implementation of a contract
    provides.

    `perform` does the effect for one started attempt; only the dispatcher's invoke path
    (`dispatch.services.worker.handler_invoke`) calls it, after checking in the store that
    the attempt holds a committed claim. `lookup` answers reconciliation; a handler that
    inherits this one's says "unknown".
    """

    name: ClassVar[str]
    implementation_fingerprint: ClassVar[str]

    def destination(self) -> JSONObject:
        """Where this handler sends, as the snapshot binds it (its fingerprint is checked)."""
        ...

    def perform(self, ctx: HandlerContext) -> JSONObject:
        """Do the effect; raise `DefiniteFailure` only when it certainly did not happen and
        `UncertainOutcome` when it may have."""
        ...

    def lookup(self, operation_id: str, snapshot: JSONObject) -> LookupResult:
        """Reconciliation: ask the destination whether this operation's effect happened."""
        return LookupResult("unknown", "this destination offers no lookup")
