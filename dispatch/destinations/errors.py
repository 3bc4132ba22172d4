"""Outcomes a destination client can report instead of a result.

The dispatcher's safety rests on one distinction: whether the destination *certainly* did not
perform the effect, or *may* have. Every client in this package reports a failure as exactly one
of the two classes below, and documents which of its failure points maps to which.
"""

from __future__ import annotations

__all__ = ["DefiniteFailure", "DestinationError", "LookupFailedError", "UncertainOutcome"]


class DestinationError(Exception):
    """Root of the destination client errors; ``reason`` is a human-readable explanation."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class DefiniteFailure(DestinationError):
    """The destination certainly did not perform the effect; nothing needs reconciling."""


class UncertainOutcome(DestinationError):
    """The destination may have performed the effect; only a lookup can settle it."""


class LookupFailedError(DestinationError):
    """A read-only lookup got no usable answer; it proves nothing either way."""
