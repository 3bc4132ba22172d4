"""Demo destinations that live outside the dispatcher's database (DESIGN §8).

A real loopback SMTP sink and a fake bank, each recording into its own SQLite file in a
directory of its own, with faults chosen by the data; the clients the dispatcher uses to reach
them; and readers that count their effects from the outside. Django-free by design: the
servers need only the standard library and aiosmtpd, so ``python -m demo.destinations`` runs
without settings.

Public API::

    send_email(host, port, *, message_id, sender, to, cc, subject, body, timeout) -> None
    lookup_message(directory, message_id) -> dict | None
    list_messages(directory) -> list[dict]
    bank_transfer(base_url, *, key, from_account, to_account, amount, currency, memo,
                  timeout) -> dict
    bank_lookup(base_url, key, timeout) -> dict | None
    list_transfers(directory) -> list[dict]
    list_all(directory) -> {"email": [...], "bank": [...]}
    serve(directory, *, smtp_port, bank_port, hang_seconds=120.0, ready=None, stop=None)

Clients raise the handler port's errors (``dispatch.handlers``, re-exported here):
:class:`DefiniteFailure` (certainly no effect) or :class:`UncertainOutcome` (maybe an effect);
bank lookups raise :class:`LookupFailedError`.
"""

from __future__ import annotations

from dispatch.handlers import (
    DefiniteFailure,
    DestinationError,
    LookupFailedError,
    UncertainOutcome,
)

from .bank import list_transfers, lookup_transfer
from .bank_client import bank_lookup, bank_transfer
from .faults import Fault
from .runner import list_all, serve
from .smtp_client import send_email
from .smtp_sink import list_messages, lookup_message

__all__ = [
    "DefiniteFailure",
    "DestinationError",
    "Fault",
    "LookupFailedError",
    "UncertainOutcome",
    "bank_lookup",
    "bank_transfer",
    "list_all",
    "list_messages",
    "list_transfers",
    "lookup_message",
    "lookup_transfer",
    "send_email",
    "serve",
]
