"""Signed permit tokens (docs/permit-tokens.md): a compact JWS (RFC 7515) signed with the
deployment's Ed25519 key, binding one attempt of a claimed operation to its approved snapshot, its
destination, its tenant and an expiry. A destination verifies one with the JWKS of
`GET /api/v1/keys/` alone: `exact_console.permits.verify` (the Python client's `permits` extra),
or any JOSE library that knows EdDSA.

Pure: no Django, no database. The JWS library is PyJWT; the header's `alg` is `EdDSA` (RFC 8037),
the name the JWKS gives the same keys and the one the standard libraries verify.

- Header: `{"alg": "EdDSA", "kid": <the signing key's kid>, "typ": "permit+jwt"}`.
- Claims: exactly `iss` (`exact-console`), `sub` (the operation id, also the destination's
  idempotency key), `aud` (the destination's name in the snapshot), `tenant`, `snapshot_digest`
  (`sha256:<hex>` of the snapshot's `canon/1` bytes), `iat`, `exp` (integer seconds since the
  epoch) and `jti` (a unique token id: a destination refuses one it has seen).
- The destination receives the snapshot's canonical text beside the request and recomputes its
  digest: SHA-256 of its UTF-8 bytes. It then checks that the request it is asked to perform is
  the snapshot's (its own rule, e.g. the bank's transfer fields are the snapshot's arguments).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

import jwt
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = ["ALGORITHM", "CLAIMS", "ISSUER", "TOKEN_TYPE", "mint_permit", "snapshot_digest",
           "snapshot_text"]

ALGORITHM: Final = "EdDSA"
TOKEN_TYPE: Final = "permit+jwt"  # noqa: S105 (a JWS "typ", not a secret)
ISSUER: Final = "exact-console"
CLAIMS: Final = ("iss", "sub", "aud", "tenant", "snapshot_digest", "iat", "exp", "jti")


def snapshot_text(snapshot: Mapping[str, Any]) -> str:
    """The canonical text of a snapshot as `json.loads` of its `canon/1` bytes gives it back
    (tags are plain objects by then): RFC 8785 of it is exactly those bytes again."""
    return rfc8785.dumps(dict(snapshot)).decode("utf-8")


def snapshot_digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def mint_permit(
    *, kid: str, key: Ed25519PrivateKey, operation_id: str, digest: str, destination: str,
    tenant: str, issued_at: int, expires_at: int, token_id: str,
) -> str:
    """One signature: the compact JWS of the claims above."""
    claims = {"iss": ISSUER, "sub": operation_id, "aud": destination, "tenant": tenant,
              "snapshot_digest": digest, "iat": issued_at, "exp": expires_at, "jti": token_id}
    # PyJWT writes the header's members sorted (alg, kid, typ) and the claims in this order,
    # compact: one token per input, byte for byte (Ed25519 signatures are deterministic).
    return jwt.encode(claims, key, algorithm=ALGORITHM, headers={"kid": kid, "typ": TOKEN_TYPE})

