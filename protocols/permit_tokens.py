"""Signed permit tokens (docs/permit-tokens.md): a compact JWS (RFC 7515) signed with the
deployment's Ed25519 key, binding one attempt of a claimed operation to its approved snapshot, its
destination, its tenant and an expiry; and their verification by a destination that holds only
the JWKS of `GET /api/v1/keys/`.

Pure: no Django, no database (the destinations import it without settings). The JWS library is
joserfc; the header's `alg` is `Ed25519` (RFC 9864's fully-specified name of EdDSA over Ed25519;
the JWKS calls the same keys' algorithm `EdDSA`).

- Header: `{"alg": "Ed25519", "kid": <the signing key's kid>, "typ": "permit+jwt"}`.
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
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import GuestProtocol, OKPKey

from protocols.auditseal import public_keys_from_jwks

__all__ = ["ALGORITHM", "CLAIMS", "ISSUER", "TOKEN_TYPE", "Permit", "PermitRefused",
           "mint_permit", "snapshot_digest", "snapshot_text", "verify_permit"]

ALGORITHM: Final = "Ed25519"
TOKEN_TYPE: Final = "permit+jwt"  # noqa: S105 (a JWS "typ", not a secret)
ISSUER: Final = "exact-console"
CLAIMS: Final = ("iss", "sub", "aud", "tenant", "snapshot_digest", "iat", "exp", "jti")
_TEXT_CLAIMS: Final = ("iss", "sub", "aud", "tenant", "snapshot_digest", "jti")


class PermitRefused(Exception):
    """The destination must not act: `reason` says why, in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Permit:
    """A verified token: its claims and the snapshot it binds, parsed."""

    kid: str
    claims: dict[str, Any]
    snapshot: dict[str, Any]


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
    header = {"alg": ALGORITHM, "kid": kid, "typ": TOKEN_TYPE}
    signed: str = jws.serialize_compact(header, json.dumps(claims, separators=(",", ":")),
                                        OKPKey.import_key(key), algorithms=[ALGORITHM])
    return signed


def verify_permit(
    token: str, jwks: Mapping[str, Any], *, audience: str, key: str, text: str, now: int,
) -> Permit:
    """The token's claims if a destination named `audience`, asked to act under idempotency key
    `key` on the snapshot whose canonical text is `text`, may act now; else `PermitRefused`.
    Replay (a `jti` seen before) is the destination's own store's to refuse."""
    keys = public_keys_from_jwks(jwks)
    kid = _kid(token)
    if kid not in keys:
        raise PermitRefused(f"the permit token is signed by an unknown key ({kid!r})")

    def resolve(obj: GuestProtocol) -> OKPKey:
        return OKPKey.import_key(keys[kid])

    try:
        signed = jws.deserialize_compact(token, resolve, algorithms=[ALGORITHM])
    except JoseError as error:
        raise PermitRefused(f"the permit token does not verify ({error.error})") from None
    if signed.headers().get("typ") != TOKEN_TYPE:
        raise PermitRefused("the token is not a permit token")
    claims = _claims(signed.payload)
    if claims["aud"] != audience:
        raise PermitRefused(f"the permit token is for another destination ({claims['aud']!r})")
    if now >= claims["exp"]:
        raise PermitRefused("the permit token has expired")
    if claims["sub"] != key:
        raise PermitRefused("the permit token is for another operation")
    if snapshot_digest(text) != claims["snapshot_digest"]:
        raise PermitRefused("the payload's digest differs from the permit token's")
    snapshot = json.loads(text)
    if not isinstance(snapshot, dict):
        raise PermitRefused("the snapshot is not a JSON object")
    return Permit(kid, claims, snapshot)


def _kid(token: str) -> str:
    try:
        header = jws.extract_compact(token.encode("ascii")).headers()
    except (JoseError, UnicodeEncodeError, ValueError):
        raise PermitRefused("no readable permit token") from None
    kid = header.get("kid")
    if not isinstance(kid, str):
        raise PermitRefused("the permit token names no key")
    return kid


def _claims(payload: bytes) -> dict[str, Any]:
    try:
        claims = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise PermitRefused("the permit token's claims are not JSON") from None
    if not isinstance(claims, dict) or sorted(claims) != sorted(CLAIMS):
        raise PermitRefused("the permit token's claims are not exactly " + ", ".join(CLAIMS))
    if claims["iss"] != ISSUER or not all(isinstance(claims[c], str) for c in _TEXT_CLAIMS) or \
            not all(type(claims[c]) is int for c in ("iat", "exp")):
        raise PermitRefused("the permit token's claims are malformed")
    return claims
