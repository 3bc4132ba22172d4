"""`exact_console.permits.verify`: what a destination checks of a permit token with the console's
JWKS alone (docs/permit-tokens.md#verification). Tokens are minted here with PyJWT, as any
EdDSA JWS would be, not with the server's code."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from exact_console.permits import PermitClaims, PermitRefused, snapshot_digest, verify

NOW = 1_800_000_000
SNAPSHOT: dict[str, Any] = {
    "operation": "payments.transfer", "contract_version": "1",
    "arguments": {"from_account": "acct-001", "to_account": "acct-999", "amount": "10.00",
                  "currency": "EUR", "memo": "Invoice 7 — März"},
    "destination": {"name": "bank", "address": "http://127.0.0.1:8026"},
}
#: The snapshot's canonical text (RFC 8785): keys sorted, no spaces, UTF-8 as is.
TEXT = ('{"arguments":{"amount":"10.00","currency":"EUR","from_account":"acct-001",'
        '"memo":"Invoice 7 — März","to_account":"acct-999"},"contract_version":"1",'
        '"destination":{"address":"http://127.0.0.1:8026","name":"bank"},'
        '"operation":"payments.transfer"}')
DIGEST = "sha256:" + hashlib.sha256(TEXT.encode("utf-8")).hexdigest()
KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
VECTORS = Path(__file__).resolve().parents[3] / "tests" / "vectors" / "permit_tokens"


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def jwk(kid: str, key: Ed25519PrivateKey) -> dict[str, str]:
    x = b64url(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
    return {"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": x, "use": "sig", "alg": "EdDSA"}


JWKS = {"keys": [jwk("k1", KEY)]}


def claims(**changed: Any) -> dict[str, Any]:
    return {"iss": "exact-console", "sub": "op_1", "aud": "bank", "tenant": "ten_1",
            "snapshot_digest": DIGEST, "iat": NOW, "exp": NOW + 75, "jti": "jti-1", **changed}


def mint(key: Any = KEY, algorithm: str = "EdDSA", headers: dict[str, Any] | None = None,
         **changed: Any) -> str:
    return jwt.encode(claims(**changed), key, algorithm=algorithm,
                      headers={"kid": "k1", "typ": "permit+jwt", **(headers or {})})


def unsigned(header: dict[str, Any], body: dict[str, Any], signature: bytes = b"") -> str:
    parts = [json.dumps(header).encode(), json.dumps(body).encode(), signature]
    return ".".join(b64url(part) for part in parts)


def refusal(token: str, jwks: Any = JWKS, **given: Any) -> str:
    with pytest.raises(PermitRefused) as refused:
        verify(token, jwks, **{"audience": "bank", "now": NOW, **given})
    return refused.value.reason


def test_a_valid_token_gives_its_claims() -> None:
    got = verify(mint(), JWKS, audience="bank", snapshot=SNAPSHOT, now=NOW)
    assert got == PermitClaims(kid="k1", iss="exact-console", sub="op_1", aud="bank",
                               tenant="ten_1", snapshot_digest=DIGEST, iat=NOW, exp=NOW + 75,
                               jti="jti-1")
    assert got.operation_id == "op_1"


def test_the_snapshot_is_a_mapping_or_its_canonical_text() -> None:
    assert snapshot_digest(SNAPSHOT) == DIGEST
    assert snapshot_digest(TEXT) == DIGEST
    assert snapshot_digest(TEXT.encode("utf-8")) == DIGEST
    for snapshot in (SNAPSHOT, TEXT, TEXT.encode("utf-8")):
        assert verify(mint(), JWKS, audience="bank", snapshot=snapshot, now=NOW).sub == "op_1"


def test_another_snapshot_is_refused() -> None:
    altered = {**SNAPSHOT, "arguments": {**SNAPSHOT["arguments"], "amount": "9999.00"}}
    assert refusal(mint(), snapshot=altered) == \
        "the payload's digest differs from the permit token's"
    # The text is taken as sent: the same value written otherwise is not the approved text.
    spaced = json.dumps(SNAPSHOT, ensure_ascii=False)
    assert refusal(mint(), snapshot=spaced) == \
        "the payload's digest differs from the permit token's"


def test_expiry_and_issue_time_allow_the_leeway_and_no_more() -> None:
    token = mint()
    assert verify(token, JWKS, audience="bank", now=NOW + 75 + 29).jti == "jti-1"
    assert refusal(token, now=NOW + 75 + 30) == "the permit token has expired"
    assert refusal(token, now=NOW + 75, leeway=0) == "the permit token has expired"
    assert verify(token, JWKS, audience="bank", now=NOW + 74, leeway=0).jti == "jti-1"
    assert verify(token, JWKS, audience="bank", now=NOW - 30).jti == "jti-1"
    assert refusal(token, now=NOW - 31) == "the permit token is issued in the future"


def test_another_audience_is_refused() -> None:
    assert refusal(mint(), audience="publisher") == \
        "the permit token is for another destination ('bank')"


@pytest.mark.parametrize("algorithm", ["none", "HS256", "HS512", "Ed25519", "ES256", ""])
def test_only_eddsa_is_accepted(algorithm: str) -> None:
    body = claims()
    signature = b""
    header = {"alg": algorithm, "kid": "k1", "typ": "permit+jwt"}
    if algorithm.startswith("HS"):
        # The classic confusion: an HMAC keyed with the public key's published bytes.
        secret = JWKS["keys"][0]["x"].encode()
        signing_input = ".".join(b64url(json.dumps(p).encode()) for p in (header, body))
        signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    assert refusal(unsigned(header, body, signature)) == \
        f"the permit token's algorithm is {algorithm!r}, not EdDSA"


def test_a_signature_by_another_key_or_changed_is_refused() -> None:
    other = mint(key=Ed25519PrivateKey.generate())
    assert refusal(other).startswith("the permit token does not verify")
    head, body, signature = mint().split(".")
    changed = f"{head}.{body}.{'A' if signature[0] != 'A' else 'B'}{signature[1:]}"
    assert refusal(changed).startswith("the permit token does not verify")
    forged_body = b64url(json.dumps(claims(aud="publisher")).encode())
    assert refusal(f"{head}.{forged_body}.{signature}", audience="publisher").startswith(
        "the permit token does not verify")


def test_an_unknown_or_missing_kid_is_refused() -> None:
    assert refusal(mint(headers={"kid": "k9"})) == \
        "the permit token is signed by an unknown key ('k9')"
    token = jwt.encode(claims(), KEY, algorithm="EdDSA", headers={"typ": "permit+jwt"})
    assert refusal(token) == "the permit token names no key"
    assert refusal(mint(), jwks={"keys": []}) == \
        "the permit token is signed by an unknown key ('k1')"


def test_a_kid_whose_key_is_not_ed25519_is_refused() -> None:
    secret = {"kty": "oct", "kid": "k1", "k": JWKS["keys"][0]["x"]}
    assert refusal(mint(), jwks={"keys": [secret]}) == \
        "the key 'k1' is not an Ed25519 signing key"
    for changed in ({"alg": "Ed25519"}, {"use": "enc"}, {"crv": "X25519"}):
        entry = {**JWKS["keys"][0], **changed}
        assert refusal(mint(), jwks={"keys": [entry]}) == \
            "the key 'k1' is not an Ed25519 signing key"


def test_keys_that_are_not_a_jwks_are_refused() -> None:
    jwks: Any
    for jwks in ({}, {"keys": "k1"}, [], {"keys": [None]}):
        assert refusal(mint(), jwks=jwks) == "the keys are not a JWKS"


def test_a_token_of_another_type_is_refused() -> None:
    assert refusal(mint(headers={"typ": "JWT"})) == "the token is not a permit token"


@pytest.mark.parametrize("token", ["", "a.b", "a.b.c", "not a token", "é.é.é"])
def test_an_unreadable_token_is_refused(token: str) -> None:
    assert refusal(token) == "no readable permit token"


@pytest.mark.parametrize("changed", [
    {"iss": "someone-else"}, {"iat": "1800000000"}, {"exp": 1.5}, {"exp": True},
    {"sub": 7}, {"jti": None},
])
def test_malformed_claims_are_refused(changed: dict[str, Any]) -> None:
    assert refusal(mint(**changed)) == "the permit token's claims are malformed"


def test_claims_other_than_the_documented_ones_are_refused() -> None:
    extra = jwt.encode({**claims(), "scope": "all"}, KEY, algorithm="EdDSA",
                       headers={"kid": "k1", "typ": "permit+jwt"})
    assert refusal(extra).startswith("the permit token's claims are not exactly iss, sub")
    body = claims()
    del body["jti"]
    missing = jwt.encode(body, KEY, algorithm="EdDSA", headers={"kid": "k1", "typ": "permit+jwt"})
    assert refusal(missing).startswith("the permit token's claims are not exactly")


def test_the_projects_vector_verifies() -> None:
    """The golden token of tests/vectors/permit_tokens/, with only its JWKS."""
    vectors = json.loads((VECTORS / "vectors.json").read_text(encoding="utf-8"))
    jwks = json.loads((VECTORS / "keys.json").read_text(encoding="utf-8"))
    text = (VECTORS / "snapshot.txt").read_text(encoding="utf-8")
    got = verify(vectors["token"], jwks, audience="bank", snapshot=text,
                 now=vectors["claims"]["iat"])
    assert got.snapshot_digest == vectors["snapshot_digest"] == snapshot_digest(text)
