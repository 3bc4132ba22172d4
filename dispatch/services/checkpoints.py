"""The checkpoint log (docs/audit-seal.md#checkpoints): each tenant's signed checkpoints, one JSON
object a line, in `AUDIT_CHECKPOINT_DIR/<tenant id>.jsonl`, outside the database.

The sealer appends to it after each sealing pass commits, and reads its last line before the
next: the chain must still hold the block it names, with its digest. Only the sealer writes it
(one pass per tenant at a time, under the tenant's lease), with one `write` of a whole line on
a file opened for appending, synced before the pass ends.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from django.conf import settings

from dispatch.models import AuditCheckpoint
from protocols.canonical import canonicalize

_TENANT_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_CHUNK = 4096


class LogUnreadableError(Exception):
    """The log's last line is not a checkpoint (torn, edited, not JSON)."""


def checkpoint_view(row: AuditCheckpoint) -> dict[str, Any]:
    return {"tenant": row.tenant_id, "block": row.block, "digest": row.digest,
            "sealed_at": row.sealed_at, "kid": row.kid, "signature": row.signature}


def log_path(tenant_id: str) -> Path:
    if not _TENANT_ID.match(tenant_id):
        raise ValueError(f"not a tenant id: {tenant_id!r}")
    return Path(settings.AUDIT_CHECKPOINT_DIR) / f"{tenant_id}.jsonl"


def log_append(checkpoint: dict[str, Any]) -> None:
    """Append one checkpoint as one line (`canon/1`: one line, no white space), synced."""
    path = log_path(checkpoint["tenant"])
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, canonicalize(checkpoint) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def log_latest(tenant_id: str) -> dict[str, Any] | None:
    """The log's last checkpoint, None when there is no log (or it is empty). Reads from the
    end: the log grows by a line a block. LogUnreadableError for a last line that is not
    a whole JSON object."""
    try:
        log = log_path(tenant_id).open("rb")
    except FileNotFoundError:
        return None
    with log:
        end = log.seek(0, os.SEEK_END)
        if end == 0:
            return None
        tail = b""
        position = end
        while position > 0 and tail[:-1].count(b"\n") == 0:
            step = min(_CHUNK, position)
            position -= step
            log.seek(position)
            tail = log.read(step) + tail
    if not tail.endswith(b"\n"):
        raise LogUnreadableError("its last line is not whole")
    line = tail[:-1].rsplit(b"\n", 1)[-1]
    try:
        found = json.loads(line)
    except ValueError:
        raise LogUnreadableError("its last line is not JSON") from None
    if not isinstance(found, dict):
        raise LogUnreadableError("its last line is not a checkpoint")
    return found
