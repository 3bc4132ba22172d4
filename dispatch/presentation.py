"""How an extension tells the console what an action says: a one-sentence summary per contract
and a reading of a resource kind's payload (`Runtime.register(..., summary=...)`,
`Runtime.register_resource_kind(kind, presentation=...)`).

Both only shape what the operator reads: the canonical snapshot, its digest and the permit never
depend on them. A summary is called with the snapshot's arguments (validated, each resource argument
resolved to its `id`, `revision`, `digest` and `payload`) and returns a `Summary`, or a plain
sentence. It names the money the action moves (`Money`); what is a large amount the deployment's
approval rules decide, currency by currency (`Runtime.large_amount`). A summary that fails, or a
contract that declares none, reads as `<operation> with N arguments` (`summarize`): a broken
sentence never hides an approval.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from protocols.jsontypes import JSONObject

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Money:
    """An amount the action moves, in the currency's major units (`Decimal("99999.99")`,
    `"EUR"`)."""

    amount: Decimal
    currency: str


@dataclass(frozen=True)
class Summary:
    """One short sentence saying what the action does, with every party it reaches named;
    `amounts`: the money it moves, if any."""

    text: str
    amounts: tuple[Money, ...] = ()


#: A contract's summary: from the snapshot's arguments to its sentence.
Summarizer = Callable[[JSONObject], Summary | str]


@dataclass(frozen=True)
class Header:
    """One header line of a message: its label and the payload member it shows (a list is
    shown as a list)."""

    label: str
    member: str


@dataclass(frozen=True)
class MessagePresentation:
    """A resource kind whose payload reads as a message (a letter, an email, a post): header
    lines, then a body whose line breaks are kept. `title` names what it is (`"Email"`). Payload
    members it does not name are still shown, under their own names."""

    title: str
    headers: tuple[Header, ...]
    body: str | None = None


def fallback_summary(operation: str, arguments: JSONObject) -> Summary:
    count = len(arguments)
    return Summary(f"{operation} with {count} argument{'' if count == 1 else 's'}")


def summarize(summarizer: Summarizer | None, operation: str, arguments: JSONObject) -> Summary:
    """The contract's sentence for `arguments`; the fallback when it declares none, or when its
    summary raises or returns an empty sentence (logged: a bug of the extension's)."""
    if summarizer is None:
        return fallback_summary(operation, arguments)
    try:
        made: object = summarizer(arguments)  # an extension's code: checked, not trusted
        summary = Summary(made) if isinstance(made, str) else made
        if not isinstance(summary, Summary) or not summary.text.strip():
            raise TypeError(f"the summary returned {made!r}, not a sentence")
    except Exception:
        logger.exception("the summary of %s failed; the console shows the fallback", operation)
        return fallback_summary(operation, arguments)
    return summary

