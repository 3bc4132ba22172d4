"""Demo destinations that live outside the dispatcher's database (docs/design.md#demo, #evidence).

A real SMTP sink (with its HTTP lookup), a fake bank, a publisher and a source server of fixed
documents (the last three on one HTTP port), each recording into its own SQLite file in a
directory of its own, with faults chosen by the data; the clients the dispatcher uses to reach
them; and readers that count their effects from the outside. Django-free by design: the servers
need only the standard library and aiosmtpd, so ``python -m demo.destinations`` runs without
settings.

Public API::

    send_email(host, port, *, message_id, sender, to, cc, subject, body, timeout) -> None
    lookup_message(directory, message_id) -> dict | None
    sink_lookup(base_url, message_id, *, timeout) -> dict | None   # over HTTP, GET /messages/<id>
    list_messages(directory) -> list[dict]
    bank_transfer(base_url, *, key, from_account, to_account, amount, currency, memo,
                  timeout) -> dict
    bank_lookup(base_url, key, timeout) -> dict | None
    list_transfers(directory) -> list[dict]
    publish(base_url, *, key, report_id, revision, digest, title, body, timeout) -> dict
    publication_lookup(base_url, key, timeout) -> dict | None
    lookup_publication(directory, key) -> dict | None
    list_publications(directory) -> list[dict]
    fetch_source(url, timeout) -> bytes
    SOURCE_DOCUMENTS: {name: bytes}
    read_source(directory, name) -> bytes | None
    replace_source(directory, name, content) -> None
    list_sources(directory) -> list[dict]
    list_all(directory) -> {"email": [...], "bank": [...], "sources": [...],
                            "publications": [...]}
    serve(directory, *, smtp_port, bank_port, lookup_port=0, host="127.0.0.1",
          hang_seconds=120.0, ready=None, stop=None)

Clients raise the handler port's errors (``dispatch.handlers``, re-exported here):
:class:`DefiniteFailure` (certainly no effect) or :class:`UncertainOutcome` (maybe an effect);
``fetch_source``, a read, only :class:`DefiniteFailure`; bank and publication lookups raise
:class:`LookupFailedError`.
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
from .publisher import list_publications, lookup_publication
from .publisher_client import publication_lookup, publish
from .runner import list_all, serve
from .smtp_client import send_email, sink_lookup
from .smtp_sink import list_messages, lookup_message
from .source_client import fetch_source
from .sources import SOURCE_DOCUMENTS, list_sources, read_source, replace_source

__all__ = [
    "SOURCE_DOCUMENTS",
    "DefiniteFailure",
    "DestinationError",
    "Fault",
    "LookupFailedError",
    "UncertainOutcome",
    "bank_lookup",
    "bank_transfer",
    "fetch_source",
    "list_all",
    "list_messages",
    "list_publications",
    "list_sources",
    "list_transfers",
    "lookup_message",
    "lookup_publication",
    "lookup_transfer",
    "publication_lookup",
    "publish",
    "read_source",
    "replace_source",
    "send_email",
    "serve",
    "sink_lookup",
]
