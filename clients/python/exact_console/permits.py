"""Verify a permit token at a destination, with the console's JWKS alone (docs/permit-tokens.md).

    from exact_console.permits import PermitRefused, verify

    jwks = ...  # the JSON of the console's GET /api/v1/keys/, fetched and kept by the destination
    try:
        claims = verify(token, jwks, audience="bank", snapshot=snapshot_text)
    except PermitRefused as refused:
        ...  # answer 403 with refused.reason; do nothing
    # then: claims.sub is the idempotency key; refuse a claims.jti seen before (replay)

A permit token is a compact JWS (RFC 7515) with `"alg": "EdDSA"` (RFC 8037, Ed25519),
`"typ": "permit+jwt"` and the signing key's `kid`, whose claims are exactly `iss`
(`exact-console`), `sub` (the operation id), `aud` (the destination's name), `tenant`,
`snapshot_digest` (`sha256:<hex>` of the approved snapshot's canonical bytes), `iat`, `exp`
(integer seconds since the epoch) and `jti`.

Needs the `permits` extra (`pip install 'exact-console[permits]'`: PyJWT with `cryptography`,
and `rfc8785`); no server, no Django.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from exact_console._extras import needs

with needs(__name__, "permits", "jwt", "rfc8785"):
    import jwt
    import rfc8785

__all__ = ["ALGORITHM", "CLAIMS", "ISSUER", "TOKEN_TYPE", "PermitClaims", "PermitRefused",
           "snapshot_digest", "verify"]

ALGORITHM: Final = "EdDSA"
TOKEN_TYPE: Final = "permit+jwt"  # noqa: S105 (a JWS "typ", not a secret)
ISSUER: Final = "exact-console"
CLAIMS: Final = ("iss", "sub", "aud", "tenant", "snapshot_digest", "iat", "exp", "jti")
_TEXT_CLAIMS: Final = ("iss", "sub", "aud", "tenant", "snapshot_digest", "jti")
_TIME_CLAIMS: Final = ("iat", "exp")


class PermitRefused(Exception):
    """The destination must not act: `reason` says why, in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class PermitClaims:
    """A verified token's claims, and the `kid` of the key that signed it."""

    kid: str
    iss: str
    sub: str
    aud: str
    tenant: str
    snapshot_digest: str
    iat: int
    exp: int
    jti: str

    @property
    def operation_id(self) -> str:
        """The operation the token permits: the destination's idempotency key."""
        return self.sub


def snapshot_digest(snapshot: Mapping[str, Any] | str | bytes) -> str:
    """`sha256:<hex>` of the snapshot's canonical bytes, as the console computes it.

    A `str` or `bytes` is the canonical text as the console sent it, hashed as it is (its UTF-8
    bytes); a mapping (that text parsed by `json.loads`) is canonicalized first (RFC 8785 JSON
    Canonicalization Scheme), which gives those bytes back."""
    if isinstance(snapshot, str):
        raw = snapshot.encode("utf-8")
    elif isinstance(snapshot, bytes):
        raw = snapshot
    else:
        raw = rfc8785.dumps(dict(snapshot))
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def verify(
    token: str, jwks: Mapping[str, Any], *, audience: str,
    snapshot: Mapping[str, Any] | str | bytes | None = None, leeway: int = 30,
    now: int | None = None,
) -> PermitClaims:
    """The claims of `token` if a destination named `audience` may act on it now; else
    `PermitRefused`, with the first reason found, in this order: the token's form, its
    algorithm (`EdDSA` only: never `none`, an HMAC or another name), its type, its key (by `kid`
    in `jwks`, an Ed25519 signing key), its signature, its claims, the audience, the expiry and
    the issue time (each `leeway` seconds of clock skew allowed), and, when `snapshot` is given,
    its digest. `now` (seconds since the epoch) defaults to the clock.

    Replay is the destination's own store's to refuse: record `jti` once, before acting."""
    header = _header(token)
    if header.get("alg") != ALGORITHM:
        raise PermitRefused(f"the permit token's algorithm is {header.get('alg')!r}, not EdDSA")
    if header.get("typ") != TOKEN_TYPE:
        raise PermitRefused("the token is not a permit token")
    kid = header.get("kid")
    if not isinstance(kid, str):
        raise PermitRefused("the permit token names no key")
    key = _key(jwks, kid)
    try:
        payload = jwt.api_jws.decode(token, key, algorithms=[ALGORITHM])
    except jwt.PyJWTError as error:
        raise PermitRefused(f"the permit token does not verify ({error})") from None
    claims = _claims(kid, payload)
    moment = int(time.time()) if now is None else now
    if claims.aud != audience:
        raise PermitRefused(f"the permit token is for another destination ({claims.aud!r})")
    if moment >= claims.exp + leeway:
        raise PermitRefused("the permit token has expired")
    if claims.iat > moment + leeway:
        raise PermitRefused("the permit token is issued in the future")
    if snapshot is not None and not hmac.compare_digest(snapshot_digest(snapshot),
                                                        claims.snapshot_digest):
        raise PermitRefused("the payload's digest differs from the permit token's")
    return claims


def _header(token: str) -> dict[str, Any]:
    try:
        header: dict[str, Any] = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise PermitRefused("no readable permit token") from None
    return header


def _key(jwks: Mapping[str, Any], kid: str) -> jwt.PyJWK:
    """The JWKS entry named `kid`, if it is an Ed25519 key for signatures (RFC 8037)."""
    given: object = jwks  # parsed JSON: checked, whatever the caller's annotation says
    entries = given.get("keys") if isinstance(given, Mapping) else None
    if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
        raise PermitRefused("the keys are not a JWKS")
    named = [entry for entry in entries if entry.get("kid") == kid]
    if not named:
        raise PermitRefused(f"the permit token is signed by an unknown key ({kid!r})")
    entry = named[0]
    if (entry.get("kty") != "OKP"
            or entry.get("crv") != "Ed25519"
            or entry.get("alg", ALGORITHM) != ALGORITHM
            or entry.get("use", "sig") != "sig"):
        raise PermitRefused(f"the key {kid!r} is not an Ed25519 signing key")
    try:
        return jwt.PyJWK(dict(entry), algorithm=ALGORITHM)
    except jwt.PyJWTError:
        raise PermitRefused(f"the key {kid!r} is not an Ed25519 signing key") from None


def _claims(kid: str, payload: bytes) -> PermitClaims:
    try:
        claims = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise PermitRefused("the permit token's claims are not JSON") from None
    if not isinstance(claims, dict) or sorted(claims) != sorted(CLAIMS):
        raise PermitRefused("the permit token's claims are not exactly " + ", ".join(CLAIMS))
    if (claims["iss"] != ISSUER
            or not all(isinstance(claims[name], str) for name in _TEXT_CLAIMS)
            or not all(type(claims[name]) is int for name in _TIME_CLAIMS)):
        raise PermitRefused("the permit token's claims are malformed")
    return PermitClaims(kid=kid, **claims)
