"""The deployment's Ed25519 signing keys (docs/audit-seal.md#keys).

`SIGNING_KEYS` (environment) is a JSON list `[{"kid": "...", "private": "<base64url raw 32-byte
Ed25519 seed>"}, ...]`; the first is the current key (it signs), the others are kept only to
verify what they signed. Without it, the embedded default generates one key into
`VAR_DIR/signing-keys.json` (mode 0600, under the git-ignored `var/`) on first use and logs so
once. `GET /api/v1/keys/` publishes the public keys as a JWKS.

A deployment that can span machines must be given its keys: a key generated on each machine
would sign with one and publish another. With `DEBUG` off, `missing_shared_keys` says why such a
deployment may not run, and every process refuses to start on it (dispatch/apps.py).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from protocols.auditseal import b64url, b64url_decode, jwk

logger = logging.getLogger(__name__)

KEY_FILE = "signing-keys.json"


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private: Ed25519PrivateKey

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()


def parse_keys(text: str) -> list[SigningKey]:
    """The `SIGNING_KEYS` format; refuses an empty list, a bad seed or a repeated kid."""
    entries = json.loads(text)
    if not isinstance(entries, list) or not entries:
        raise ValueError("SIGNING_KEYS must be a non-empty JSON list of {kid, private}")
    keys: list[SigningKey] = []
    for entry in entries:
        seed = b64url_decode(entry["private"])
        if len(seed) != 32:
            raise ValueError(f"SIGNING_KEYS: key {entry['kid']!r} is not a 32-byte seed")
        keys.append(SigningKey(str(entry["kid"]), Ed25519PrivateKey.from_private_bytes(seed)))
    if len({k.kid for k in keys}) != len(keys):
        raise ValueError("SIGNING_KEYS: kids must be unique")
    return keys


def generate_entry() -> dict[str, str]:
    seed = Ed25519PrivateKey.generate().private_bytes(
        Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return {"kid": "key-" + secrets.token_hex(8), "private": b64url(seed)}


def _default_keys(var_dir: Path) -> list[SigningKey]:
    path = var_dir / KEY_FILE
    if not path.exists():
        text = json.dumps([generate_entry()])
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process made it first: use its key
        else:
            with os.fdopen(fd, "w") as out:
                out.write(text)
            logger.warning("signing: generated a new Ed25519 signing key into %s (set "
                           "SIGNING_KEYS in production)", path)
    return parse_keys(path.read_text())


#: The embedded default: one machine's SQLite file and broker folders (an in-memory broker
#: holds one process's tasks). Any other store or broker can be shared by several machines.
EMBEDDED_BROKERS = ("filesystem://", "memory://")


def missing_shared_keys() -> str | None:
    """Why this deployment may not run as configured, or None: `DEBUG` off, no `SIGNING_KEYS`,
    and a database or a broker that several machines can share (docs/deployment.md#keys)."""
    if settings.DEBUG:
        return None
    if settings.SIGNING_KEYS:
        return None
    shared = []
    if not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        shared.append("DATABASE_URL")
    if not str(settings.CELERY_BROKER_URL).startswith(EMBEDDED_BROKERS):
        shared.append("CELERY_BROKER_URL")
    if not shared:
        return None
    return (f"SIGNING_KEYS is not set, and {' and '.join(shared)} can be shared by several "
            "machines: each would generate a signing key of its own, sign with it and publish "
            "another. Give every process the same SIGNING_KEYS (or SIGNING_KEYS_FILE).")


@cache
def signing_keys() -> list[SigningKey]:
    configured: str = getattr(settings, "SIGNING_KEYS", "")
    if configured:
        return parse_keys(configured)
    return _default_keys(Path(settings.VAR_DIR))


@receiver(setting_changed)
def _keys_follow_settings(*, setting: str, **_: Any) -> None:
    """A changed `SIGNING_KEYS` or `VAR_DIR` (a test's override, entered or left) drops the
    cached keys, so nothing signs with keys the settings no longer name."""
    if setting in ("SIGNING_KEYS", "VAR_DIR"):
        signing_keys.cache_clear()


def current_key() -> SigningKey:
    return signing_keys()[0]


def jwks() -> dict[str, Any]:
    return {"keys": [jwk(key.kid, key.public) for key in signing_keys()]}
