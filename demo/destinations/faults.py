"""Fault triggers chosen by the data, as payment processors' test cards do (docs/design.md#demo).

A recipient domain (email), a memo (bank) or a report title (publisher, docs/design.md#evidence)
equal to one of the trigger names below makes the destination misbehave in a known way, so that any
client can provoke each failure mode.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

__all__ = ["Fault", "fault_for_addresses", "fault_for_memo", "fault_for_title"]


class Fault(enum.StrEnum):
    """The trigger names; each value is the email domain, the memo and the title selecting it."""

    FAIL_BEFORE = "fail-before.test"
    """Refuse before any effect (SMTP 550 at RCPT, HTTP 422); nothing is recorded."""
    NO_RECORD = "no-record.test"
    """Email only: take the whole message, answer the end of ``DATA`` with 451 and record
    nothing. The sender cannot tell whether it went out, and the sink holds no trace of it, so
    its lookup cannot tell either: the outcome stays unknown until a person decides. A memo or
    a title naming it selects no fault."""
    LOSE_RESPONSE = "lose-response.test"
    """Record the effect, then drop the connection without answering, on every attempt."""
    LOSE_RESPONSE_ONCE = "lose-response-once.test"
    """As ``LOSE_RESPONSE`` for the first attempt only; a repeat is answered normally."""
    HANG = "hang.test"
    """Record the effect, then wait ``hang_seconds`` before answering."""


# When several triggers are present the most disruptive one wins, in this order.
_PRECEDENCE = (Fault.FAIL_BEFORE, Fault.NO_RECORD, Fault.LOSE_RESPONSE, Fault.LOSE_RESPONSE_ONCE,
               Fault.HANG)
# What a memo or a title can select: the HTTP destinations have no `NO_RECORD`.
_TEXT_PRECEDENCE = tuple(fault for fault in _PRECEDENCE if fault is not Fault.NO_RECORD)


def _domain(address: str) -> str:
    """Return the lower-cased domain of ``address`` (``""`` when it has none)."""
    _, at, domain = address.strip().strip("<>").rpartition("@")
    return domain.strip().lower() if at else ""


def fault_for_addresses(addresses: Iterable[str]) -> Fault | None:
    """Return the fault selected by the recipients' domains, or ``None`` for normal delivery.

    A domain selects a fault only when it equals a trigger name exactly (case-insensitive);
    subdomains such as ``x.hang.test`` do not.
    """
    domains = {_domain(address) for address in addresses}
    return next((fault for fault in _PRECEDENCE if fault.value in domains), None)


def _fault_for_text(text: str) -> Fault | None:
    """Return the fault whose name ``text`` equals (trimmed, case-insensitive), else ``None``."""
    normalized = text.strip().lower()
    return next((fault for fault in _TEXT_PRECEDENCE if fault.value == normalized), None)


def fault_for_memo(memo: str) -> Fault | None:
    """Return the fault selected by a transfer memo equal to a trigger name, else ``None``."""
    return _fault_for_text(memo)


def fault_for_title(title: str) -> Fault | None:
    """Return the fault selected by a publication title equal to a trigger name, else ``None``."""
    return _fault_for_text(title)
