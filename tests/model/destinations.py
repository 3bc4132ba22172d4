"""In-process destination models for the lifecycle model (tests/model/machine.py): pure Python
objects, made anew for every example, that the model's handlers (tests/model/extension.py) talk
to instead of a bank, a mail system or a publisher.

A destination keeps every effect it performed, keyed by the idempotency key it was sent (the
operation id). What it does with the next call is scripted by the test, one behaviour per call:

- `ok`: performs the effect and answers;
- `lose`: performs the effect, then the response is lost (the handler reports uncertain);
- `refuse`: refuses before any effect (a definite failure);
- `down`: the connection is refused, nothing reaches it (a definite failure);
- `timeout`: no answer within the contract timeout, and the request was never delivered
  (uncertain, and in truth no effect);
- `late`: no answer within the contract timeout; the request is delivered later, 1.5 contract
  timeouts after it was sent (uncertain, and in truth an effect that lands afterwards; always
  within the three timeouts `dispatch.services.renewals.RENEWAL_FENCE_TIMEOUTS` presumes).

A deduplicating destination (`dedup=True`) performs at most one effect per key: a repeat of a
key it holds answers the first answer (or loses it), whatever was scripted, unless it is down.
One that does not deduplicate performs every request that reaches it.

Lookups answer the truth (`present` when the key's effect is held, `absent` otherwise, a
request still in flight included, as a real destination would) or, switched to `fail`, an
inconclusive `unknown`. Whether an absence proves anything is the contract's to say
(`Reconciliation`), not the destination's.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from dispatch.handlers import DefiniteFailure, LookupResult, UncertainOutcome

BEHAVIOURS = ("ok", "lose", "refuse", "down", "timeout", "late")
#: How long after it was sent a `late` request lands, in contract timeouts.
LATE_DELIVERY_TIMEOUTS = 1.5


@dataclass(frozen=True)
class Effect:
    key: str
    attempt: int
    at: datetime


@dataclass(frozen=True)
class InFlight:
    key: str
    attempt: int
    due: datetime


@dataclass
class DestinationModel:
    name: str
    dedup: bool
    effects: list[Effect] = field(default_factory=list)
    in_flight: list[InFlight] = field(default_factory=list)
    script: deque[str] = field(default_factory=deque)
    lookups: str = "answer"  # or "fail"
    calls: int = 0

    def held(self, key: str) -> int:
        """How many effects this destination holds for `key`."""
        return sum(1 for effect in self.effects if effect.key == key)

    def pending(self, key: str) -> bool:
        return any(flight.key == key for flight in self.in_flight)

    def call(self, *, key: str, attempt: int, now: datetime, timeout: float) -> dict[str, Any]:
        """One request, as the handler sends it; what it does is the next scripted behaviour
        (`ok` once the script is spent)."""
        self.calls += 1
        behaviour = self.script.popleft() if self.script else "ok"
        if behaviour == "down":
            raise DefiniteFailure(f"{self.name}: connection refused")
        if self.dedup and self.held(key):
            # The key was seen: the first answer again, never a second effect.
            if behaviour in ("lose", "timeout", "late"):
                raise UncertainOutcome(f"{self.name}: no answer (the key was already held)")
            return self._answer(key)
        if behaviour == "refuse":
            raise DefiniteFailure(f"{self.name}: refused before any effect")
        if behaviour == "timeout":
            raise UncertainOutcome(f"{self.name}: no answer within the contract timeout")
        if behaviour == "late":
            self.in_flight.append(InFlight(key, attempt, now + timedelta(
                seconds=LATE_DELIVERY_TIMEOUTS * timeout)))
            raise UncertainOutcome(f"{self.name}: no answer within the contract timeout")
        self._perform(key, attempt, now)
        if behaviour == "lose":
            raise UncertainOutcome(f"{self.name}: the response was lost")
        return self._answer(key)

    def deliver(self, now: datetime) -> list[InFlight]:
        """Land every late request due by `now`, in the order they fall due."""
        due = sorted((f for f in self.in_flight if f.due <= now), key=lambda f: f.due)
        for flight in due:
            self.in_flight.remove(flight)
            if not (self.dedup and self.held(flight.key)):
                self._perform(flight.key, flight.attempt, flight.due)
        return due

    def lookup(self, key: str) -> LookupResult:
        if self.lookups == "fail":
            return LookupResult("unknown", f"{self.name}: the lookup failed")
        if self.held(key):
            return LookupResult("present", f"{self.name} holds {key}")
        return LookupResult("absent", f"{self.name} holds nothing for {key}")

    def _perform(self, key: str, attempt: int, at: datetime) -> None:
        self.effects.append(Effect(key, attempt, at))

    def _answer(self, key: str) -> dict[str, Any]:
        return {"key": key, "destination": self.name}


class Environment(Protocol):
    """What the model's handlers need of the example that runs them."""

    def destination(self, name: str) -> DestinationModel: ...

    def now(self) -> datetime: ...

    def reached(self, point: str) -> None: ...


class _Current:
    environment: Environment | None = None


CURRENT = _Current()


def environment() -> Environment:
    """The running example's environment; a handler called outside one refuses, no effect."""
    if CURRENT.environment is None:
        raise DefiniteFailure("no model environment is running")
    return CURRENT.environment
