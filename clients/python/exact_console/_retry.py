"""When a call is sent again, shared by `Client` and `AsyncClient` as `_calls` shares the calls:
the policy and its decisions (`failure` is pure; `Attempts` reads the clock and draws the
jitter); the clients send and sleep.

What may go again (clients/python/README.md, "Retries"):

- any call refused before anything ran: a connection that could not be made (nothing was sent),
  or the API's rate limit (429 `budget_exhausted` with `details.reason` "rate limit": the
  throttle refuses before the view runs);
- a call that is safe to repeat (`Call.retry`: a read, or a proposal with a `call_id`, which the
  console answers with the first proposal) after a dropped or timed-out connection, or a 429,
  502, 503 or 504 from the console or a proxy in front of it. A 429 that is the API's own
  refusal for another reason (a spent budget) is an answer, never retried.

How long between tries: exponential from `Retry.first`, capped at `Retry.most`, with a share
`Retry.jitter` of each pause drawn at random (clients of one outage spread out), and never
sooner than the server's `Retry-After` (RFC 9110 §10.2.3: seconds or an HTTP date). A single
call tries `Retry.attempts` more times at most and waits for a `Retry-After` up to
`Retry.longest_asked`; within a wait (`deadline` given) a call tries until the wait's deadline,
never sleeps past it, and gives up at once when the server asks for longer than is left.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, NoReturn

import httpx

from exact_console._calls import Call, answer, request_id
from exact_console.errors import Error, TransportError

#: The statuses of a console that is away for a moment (a proxy with no upstream, a restart, a
#: rate limit): a call that is safe to repeat is sent again.
RETRY_STATUSES = frozenset({429, 502, 503, 504})

#: Failures after which the request is known not to have been sent.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout)
#: Failures after which a request may or may not have reached the console.
LOST = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)

#: Within a wait, the shortest request timeout: the look at the deadline may take this long.
LAST_LOOK = 1.0

_SECONDS = re.compile(r"\s*([0-9]{1,9})\s*")


@dataclass(frozen=True)
class Retry:
    """The retry policy of a client (see the module). `attempts`: a single call's tries after
    the first; `first`, `most`: the backoff's first and longest pause (seconds); `jitter`: the
    share of each pause drawn at random, in [0, 1]; `longest_asked`: the longest `Retry-After`
    a single call waits for (a longer one ends it at once)."""

    attempts: int = 2
    first: float = 0.2
    most: float = 5.0
    jitter: float = 0.5
    longest_asked: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 0 or min(self.first, self.most, self.longest_asked) < 0:
            raise ValueError("attempts and seconds are >= 0")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter is a share in [0, 1], not {self.jitter}")

    def backoff(self, failures: int, *, draw: float) -> float:
        """The pause after `failures` + 1 failed tries; `draw` is uniform in [0, 1)."""
        ceiling = min(self.most, self.first * 2.0 ** min(failures, 60))
        return ceiling * (1.0 - self.jitter + self.jitter * draw)


def parse_retry_after(value: str | None, *, now: datetime) -> float | None:
    """A `Retry-After` header as seconds from `now` (an HTTP date in the past is 0), or None
    when it is absent or not understood (then the backoff alone decides)."""
    if value is None:
        return None
    seconds = _SECONDS.fullmatch(value)
    if seconds:
        return float(seconds.group(1))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    left = (when if when.tzinfo else when.replace(tzinfo=UTC)) - now
    return max(0.0, left.total_seconds()) if math.isfinite(left.total_seconds()) else None


@dataclass(frozen=True)
class Failure:
    """A try that may be made again: what was seen (told in the final error) and the pause the
    server asked for."""

    seen: str
    asked: float | None = None


def _rate_limited(response: httpx.Response) -> bool | None:
    """True for the API's rate-limit refusal, False for another refusal of the API's, None for
    a body that is not the API's error (a proxy's page)."""
    try:
        error = json.loads(response.content).get("error")
    except (ValueError, AttributeError):
        return None
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        return None
    details = error.get("details")
    return isinstance(details, dict) and details.get("reason") == "rate limit"


def failure(call: Call[Any], outcome: httpx.Response | httpx.TransportError, *,
            now: datetime) -> Failure | None:
    """The `Failure` of a try that may be made again, or None when `outcome` is final."""
    if isinstance(outcome, httpx.TransportError):
        if isinstance(outcome, NOT_SENT) or (call.retry and isinstance(outcome, LOST)):
            return Failure(f"{type(outcome).__name__}: {outcome}")
        return None
    status = outcome.status_code
    if status not in RETRY_STATUSES:
        return None
    limited = _rate_limited(outcome) if status == 429 else None
    if not (limited or (call.retry and limited is not False)):
        return None
    asked = parse_retry_after(outcome.headers.get("Retry-After"), now=now)
    reason = outcome.reason_phrase or httpx.codes.get_reason_phrase(status)
    return Failure(f"status {status} {reason}".rstrip(), asked)


class OutOfTime(Exception):  # not an Error of the client: a signal to a wait
    """A wait's deadline came while a call was failing: `error` is how its last try failed."""

    def __init__(self, error: Error) -> None:
        super().__init__(str(error))
        self.error = error


class Attempts:
    """The tries of one call. After each, `pause(outcome)` is how long to sleep before the next
    one, or None when `outcome` is the last; `result(outcome)` then answers it or raises."""

    def __init__(self, call: Call[Any], policy: Retry, *, deadline: float | None = None) -> None:
        self.call = call
        self.policy = policy
        self.deadline = deadline
        #: Sent as `X-Request-ID` with every try, so that the console's logs of each retry
        #: name the one call.
        self.request_id = request_id()
        self.tries = 0
        self.why_not: str | None = None  # why a failure that could go again did not
        self.gave_up = False

    def timeout(self, default: httpx.Timeout) -> httpx.Timeout:
        """The next try's request timeout: the client's, but within a wait no longer than the
        time left, and no less than `LAST_LOOK` (the look taken at the deadline gets that
        long to answer)."""
        if self.deadline is None:
            return default
        left = max(self.deadline - time.monotonic(), LAST_LOOK)

        def cut(part: float | None) -> float:
            return left if part is None else min(part, left)

        return httpx.Timeout(connect=cut(default.connect), read=cut(default.read),
                             write=cut(default.write), pool=cut(default.pool))

    def pause(self, outcome: httpx.Response | httpx.TransportError) -> float | None:
        self.tries += 1
        failed = failure(self.call, outcome, now=datetime.now(UTC))
        if failed is None:
            return None
        self.why_not = failed.seen
        asked = failed.asked or 0.0
        pause = max(self.policy.backoff(self.tries - 1, draw=random.random()), asked)  # noqa: S311  # jitter, not a secret
        if self.deadline is None:
            if asked > self.policy.longest_asked:
                return self._give_up(f"{failed.seen}, Retry-After {asked:g} s: longer than "
                                     f"a call waits ({self.policy.longest_asked:g} s)")
            if self.tries > self.policy.attempts:
                return self._give_up(failed.seen)
            return pause
        left = self.deadline - time.monotonic()
        if asked > left:
            return self._give_up(f"{failed.seen}, Retry-After {asked:g} s: past the deadline "
                                 f"({max(left, 0):.1f} s left)")
        if left <= 0:
            return self._give_up(failed.seen)
        return min(pause, left)

    def _give_up(self, why: str) -> float | None:
        """None, the end of the tries, having noted why."""
        self.why_not = why
        self.gave_up = True
        return None

    def result(self, outcome: httpx.Response | httpx.TransportError) -> dict[str, Any]:
        """The JSON object of the last try's answer; or its refusal (`Denied`) or failure
        (`TransportError`) raised; within a wait whose deadline came first, `OutOfTime`."""
        tried = "once" if self.tries == 1 else f"{self.tries} times"
        where = f"{self.call.method} {self.call.path}"
        try:
            if isinstance(outcome, httpx.TransportError):
                seen = (self.why_not if self.gave_up and self.why_not
                        else f"{type(outcome).__name__}: {outcome}")
                raise TransportError(f"{where}: {seen} (tried {tried})") from outcome
            if self.gave_up:
                _gave_up(outcome, f"{where}: {self.why_not} (tried {tried})")
            return answer(outcome)
        except Error as error:
            if self.gave_up and self.deadline is not None:
                raise OutOfTime(error) from error
            raise


def _gave_up(response: httpx.Response, message: str) -> NoReturn:
    """Raises the refusal of the API's error body, or a `TransportError` saying what was seen."""
    try:
        answer(response)
    except TransportError:
        raise TransportError(message) from None
    raise TransportError(message)  # a success is never given up on
