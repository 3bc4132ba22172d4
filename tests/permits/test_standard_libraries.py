"""A permit token the server mints (a claimed operation, through the real services) verifies with
the standard JOSE libraries and the JWKS that `GET /api/v1/keys/` answers, nothing else
(docs/permit-tokens.md#format): PyJWT through `jwt.PyJWK`, joserfc through its
`KeySet`. Both refuse a changed signature, a token signed by another key under the deployment's
kid, an unknown kid and another destination's audience."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.test import Client
from django.utils import timezone
from joserfc import errors as jose_errors
from joserfc import jwt as jose_jwt
from joserfc.jwk import KeySet
from joserfc.jwt import JWTClaimsRegistry

from dispatch import signing
from dispatch.models import Operation
from dispatch.runtime import get_runtime
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.permit_tokens import permit_token
from protocols.auditseal import b64url
from tests.conftest import make_world

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # joserfc warns on every EdDSA use (RFC 9864 deprecates the name) and verifies it all the same.
    pytest.mark.filterwarnings("ignore:EdDSA is deprecated via RFC 9864"),
]

DEPLOYMENT = {"kid": "deployment-1", "private": b64url(bytes(range(32)))}


@pytest.fixture(autouse=True)
def _keys(settings: Any) -> Iterator[None]:
    signing.signing_keys.cache_clear()
    settings.SIGNING_KEYS = json.dumps([DEPLOYMENT])
    yield
    signing.signing_keys.cache_clear()


def published_jwks() -> dict[str, Any]:
    """The JSON of `GET /api/v1/keys/`, as a destination fetches it (no token)."""
    response = Client().get("/api/v1/keys/")
    assert response.status_code == 200
    jwks: dict[str, Any] = json.loads(response.content)
    return jwks


def minted() -> tuple[Operation, str]:
    world = make_world(timezone.now())
    proposal = world.propose_transfer(amount="10.00")
    world.grant(proposal)
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id,
                                  now=timezone.now(), enqueue=False)
    return operation, permit_token(operation, get_runtime().contract(operation.operation))


def with_header(token: str, **header: Any) -> str:
    """The token's claims signed again by a key that is not the deployment's, under `header`."""
    claims = json.loads(jwt.api_jws.base64url_decode(token.split(".")[1]))
    return jwt.encode(claims, Ed25519PrivateKey.generate(), algorithm="EdDSA",
                      headers={"typ": "permit+jwt", **header})


def resigned_signature(token: str) -> str:
    head, body, signature = token.split(".")
    flipped = "A" if signature[0] != "A" else "B"
    return f"{head}.{body}.{flipped}{signature[1:]}"


def pyjwt_verify(token: str, jwks: dict[str, Any], *, audience: str) -> dict[str, Any]:
    kid = jwt.get_unverified_header(token)["kid"]
    key = jwt.PyJWKSet.from_dict(jwks)[kid]
    claims: dict[str, Any] = jwt.decode(token, key, algorithms=["EdDSA"], audience=audience,
                                        issuer="exact-console",
                                        options={"require": ["exp", "iat", "sub", "jti"]})
    return claims


def joserfc_verify(token: str, jwks: dict[str, Any], *, audience: str) -> dict[str, Any]:
    decoded = jose_jwt.decode(token, KeySet.import_key_set(jwks), algorithms=["EdDSA"])
    JWTClaimsRegistry(aud={"essential": True, "value": audience},
                      iss={"essential": True, "value": "exact-console"},
                      exp={"essential": True}, sub={"essential": True}).validate(decoded.claims)
    return dict(decoded.claims)


def test_the_jwks_names_eddsa_okp_keys() -> None:
    (key,) = published_jwks()["keys"]
    assert set(key) == {"kty", "crv", "kid", "x", "use", "alg"}
    assert (key["kty"], key["crv"], key["use"], key["alg"]) == ("OKP", "Ed25519", "sig", "EdDSA")
    assert key["kid"] == "deployment-1"


def test_a_minted_token_says_eddsa_and_pyjwt_verifies_it_with_the_jwks_alone() -> None:
    operation, token = minted()
    assert jwt.get_unverified_header(token) == {"alg": "EdDSA", "kid": "deployment-1",
                                                "typ": "permit+jwt"}
    claims = pyjwt_verify(token, published_jwks(), audience="bank")
    assert set(claims) == {"iss", "sub", "aud", "tenant", "snapshot_digest", "iat", "exp", "jti"}
    assert claims["sub"] == operation.id
    assert claims["tenant"] == operation.tenant_id
    assert claims["snapshot_digest"] == operation.proposal.digest
    assert claims["iat"] <= time.time() < claims["exp"]


def test_joserfc_verifies_a_minted_token_with_the_jwks_alone() -> None:
    operation, token = minted()
    claims = joserfc_verify(token, published_jwks(), audience="bank")
    assert claims["sub"] == operation.id
    assert claims["snapshot_digest"] == operation.proposal.digest


def test_both_libraries_refuse_a_changed_signature() -> None:
    _, token = minted()
    jwks = published_jwks()
    with pytest.raises(jwt.InvalidSignatureError):
        pyjwt_verify(resigned_signature(token), jwks, audience="bank")
    with pytest.raises(jose_errors.BadSignatureError):
        joserfc_verify(resigned_signature(token), jwks, audience="bank")


def test_both_libraries_refuse_another_key_under_the_deployments_kid() -> None:
    _, token = minted()
    jwks = published_jwks()
    forged = with_header(token, kid="deployment-1")
    with pytest.raises(jwt.InvalidSignatureError):
        pyjwt_verify(forged, jwks, audience="bank")
    with pytest.raises(jose_errors.BadSignatureError):
        joserfc_verify(forged, jwks, audience="bank")


def test_both_libraries_refuse_an_unknown_kid() -> None:
    _, token = minted()
    jwks = published_jwks()
    forged = with_header(token, kid="not-published")
    with pytest.raises(KeyError):  # PyJWKSet has no key of that kid
        pyjwt_verify(forged, jwks, audience="bank")
    with pytest.raises(jose_errors.InvalidKeyIdError, match="not-published"):
        joserfc_verify(forged, jwks, audience="bank")


def test_both_libraries_refuse_another_destinations_audience() -> None:
    _, token = minted()
    jwks = published_jwks()
    with pytest.raises(jwt.InvalidAudienceError):
        pyjwt_verify(token, jwks, audience="publisher")
    with pytest.raises(jose_errors.InvalidClaimError, match="aud"):
        joserfc_verify(token, jwks, audience="publisher")

