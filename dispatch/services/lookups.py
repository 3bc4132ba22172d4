"""Asking a destination whether an operation's effect happened (docs/design.md#reconciliation):
bounded in time, and remembered on the operation (its last verdict and when it was given), so
that the admin who resolves an unknown outcome sees what the destination last said."""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connections

from dispatch.handlers import Handler, LookupResult
from dispatch.models import Operation
from protocols.jsontypes import JSONObject

log = logging.getLogger(__name__)


def lookup_bounded(handler: Handler, operation_id: str, snapshot: JSONObject) -> LookupResult:
    """Ask the destination, for at most `RECONCILE_LOOKUP_TIMEOUT` seconds. A lookup that
    raises or does not answer settles nothing: inconclusive, for this operation only."""
    timeout = float(settings.RECONCILE_LOOKUP_TIMEOUT)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["found"] = handler.lookup(operation_id, snapshot)
        except Exception as exc:  # any failure of a lookup is an inconclusive answer
            box["error"] = exc
        finally:
            connections.close_all()  # this thread's own, if the lookup opened any

    worker = threading.Thread(target=run, name=f"lookup-{operation_id}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        return LookupResult("unknown", f"the lookup gave no answer within {timeout:g}s")
    if "error" in box:
        error = box["error"]
        log.warning("lookup of %s failed: %r", operation_id, error)
        return LookupResult("unknown", f"the lookup failed: {type(error).__name__}: {error}")
    found = box["found"]
    if not isinstance(found, LookupResult) or found.found not in ("present", "absent", "unknown"):
        return LookupResult("unknown", f"the lookup answered something unusable: {found!r}")
    return found


def lookup_record(operation: Operation, found: LookupResult, now: datetime) -> None:
    """Remember the lookup's verdict (`present`, `absent` or `unknown`) and its time on the
    operation. Not a move: the state, the evidence and `updated_at` stay as they are (a stale
    claim's timeout counts from `updated_at`)."""
    Operation.objects.filter(id=operation.id).update(lookup_found=found.found,
                                                     looked_up_at=now)
    operation.lookup_found, operation.looked_up_at = found.found, now
