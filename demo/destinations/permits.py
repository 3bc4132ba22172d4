"""The permit check of the bank and the publisher (docs/permit-tokens.md): defence in depth that
holds even against a compromised worker.

A destination started with a keys file (``--keys F``, the JSON of the console's
``GET /api/v1/keys/``; re-read on every request, so a rotated file is picked up at once) acts on a
write only if its ``Authorization: Bearer <token>`` is a permit token that verifies under those
keys, is for this destination, for this idempotency key, unexpired, bound to the digest of the
snapshot text sent as the body's ``snapshot`` member, whose arguments are exactly the request's
fields, and whose token id this destination has never seen (kept in its own SQLite file, in the
same transaction-per-check discipline as its records). Anything else answers 403 and records
nothing: the dispatcher's client reads that as a definite failure, so the operation ends
``failed_no_effect``. The token itself is checked as any destination would check it, with the
Python client's ``exact_console.permits.verify`` (its ``permits`` extra) and the JWKS alone,
allowing its default clock-skew leeway. Started without a keys file, a destination checks
nothing (the legacy demo mode; the project's own demo and tests always pass one).
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .storage import write_transaction

if TYPE_CHECKING:
    from exact_console.permits import PermitClaims

__all__ = ["TOKENS_SCHEMA", "PermitRule", "action_permit_refusal", "permit_refusal"]

TOKENS_SCHEMA = """
CREATE TABLE IF NOT EXISTS permit_tokens (
    jti TEXT PRIMARY KEY,         -- a token id seen once is refused ever after
    operation TEXT NOT NULL,
    expires INTEGER NOT NULL,     -- the token's exp: a row older than this may be pruned
    seen_at TEXT NOT NULL         -- ISO 8601, UTC
);
"""


@dataclass(frozen=True)
class PermitRule:
    """What a destination checks beyond the token: its own name (the token's ``aud``), the
    operation its requests carry out (the snapshot's ``operation``: another contract sent here
    with the same field names is refused), and the request fields (all but ``key``) that the
    snapshot's arguments imply."""

    audience: str
    operation: str
    expected: Callable[[Mapping[str, Any]], Mapping[str, Any]]


def permit_refusal(
    *, keys_file: Path | None, db: Path, rule: PermitRule, authorization: str | None,
    raw: bytes, fields: Mapping[str, Any],
) -> str | None:
    """Why this write must not happen (one line for the 403), or None if it may."""
    if keys_file is None:
        return None
    found = _token(keys_file, authorization)
    if isinstance(found, str):
        return found
    text = json.loads(raw).get("snapshot")  # `raw` is a JSON object: the ledger parsed it
    if not isinstance(text, str):
        return "no snapshot beside the permit token"
    claims = _verified(*found, rule.audience, text)
    if isinstance(claims, str):
        return claims
    if claims.sub != str(fields["key"]):
        return "the permit token is for another operation"
    snapshot = json.loads(text)  # the approved canonical text: its digest is the token's
    if not isinstance(snapshot, dict):
        return "the snapshot is not a JSON object"
    if snapshot.get("operation") != rule.operation:
        return f"the snapshot is not a {rule.operation} request"
    try:
        expected = rule.expected(snapshot)
    except (KeyError, TypeError):
        return f"the snapshot is not a {rule.audience} request"
    if any(fields.get(name) != value for name, value in expected.items()):
        return "the request differs from the approved snapshot"
    if not _first_use(db, claims):
        return "the permit token was used before (replayed)"
    return None


def action_permit_refusal(
    *, keys_file: Path | None, db: Path, audience: str, authorization: str | None, key: str,
) -> str | None:
    """Why an HTTP action's request must not happen (docs/actions.md, "Verify the permit token"),
    or None if it may: the token verifies for `audience`, it is for the operation of the
    request's `Idempotency-Key`, and it is used once. An HTTP action sends no snapshot, so the
    token's digest is not checked against the body."""
    if keys_file is None:
        return None
    found = _token(keys_file, authorization)
    claims = found if isinstance(found, str) else _verified(*found, audience, None)
    if isinstance(claims, str):
        return claims
    if claims.sub != key:
        return "the permit token is for another operation"
    if not _first_use(db, claims):
        return "the permit token was used before (replayed)"
    return None


def _token(keys_file: Path, authorization: str | None) -> tuple[Any, str] | str:
    """The keys file's JWKS and the request's bearer token; else why not."""
    try:
        jwks = json.loads(keys_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "the destination cannot read its keys; nothing was done"
    token = (authorization or "").removeprefix("Bearer ").strip()
    if not token:
        return "no permit token"
    return jwks, token


def _verified(jwks: Any, token: str, audience: str, snapshot: str | None) -> PermitClaims | str:
    """The token's claims, checked with `exact_console.permits.verify`; else why not."""
    # Imported here, by the destinations' process alone: the console's web and worker processes
    # import this package for its clients (bank_client, ...) and need no Python client installed.
    from exact_console.permits import PermitRefused, verify

    try:
        return verify(token, jwks, audience=audience, snapshot=snapshot)
    except PermitRefused as refused:
        return refused.reason


def _first_use(db: Path, claims: PermitClaims) -> bool:
    """Record the token id; False if it was already recorded (its PRIMARY KEY decides)."""
    try:
        with write_transaction(db) as conn:
            conn.execute("INSERT INTO permit_tokens (jti, operation, expires, seen_at) "
                         "VALUES (?, ?, ?, ?)",
                         (claims.jti, claims.sub, claims.exp,
                          dt.datetime.now(dt.UTC).isoformat()))
    except sqlite3.IntegrityError:
        return False
    return True
