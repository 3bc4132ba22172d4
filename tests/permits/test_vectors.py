"""The permit-token test vectors (tests/vectors/permit_tokens/, docs/permit-tokens.md#test-vectors):
the token re-mints byte for byte from the documented inputs; PyJWT and joserfc verify it with only
the vectors' JWKS; and each case gets its documented verdict from the client's verifier
(`exact_console.permits.verify`), with only that JWKS."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from joserfc import jwt as jose_jwt
from joserfc.jwk import KeySet

from exact_console.permits import PermitRefused, verify
from protocols.auditseal import b64url_decode
from protocols.permit_tokens import mint_permit, snapshot_digest

HERE = Path(__file__).resolve().parents[1] / "vectors" / "permit_tokens"
VECTORS = json.loads((HERE / "vectors.json").read_text(encoding="utf-8"))
KEYS = json.loads((HERE / VECTORS["keys"]).read_text(encoding="utf-8"))
CLAIMS = VECTORS["claims"]


def test_the_token_re_mints_from_the_documented_inputs() -> None:
    text = (HERE / VECTORS["snapshot_file"]).read_text(encoding="utf-8")
    assert snapshot_digest(text) == VECTORS["snapshot_digest"] == CLAIMS["snapshot_digest"]
    assert (HERE / "token.txt").read_text(encoding="ascii").strip() == VECTORS["token"]
    key = Ed25519PrivateKey.from_private_bytes(b64url_decode(VECTORS["seed_b64url"]))
    assert mint_permit(kid=VECTORS["kid"], key=key, operation_id=CLAIMS["sub"],
                       digest=CLAIMS["snapshot_digest"], destination=CLAIMS["aud"],
                       tenant=CLAIMS["tenant"], issued_at=CLAIMS["iat"],
                       expires_at=CLAIMS["exp"], token_id=CLAIMS["jti"]) == VECTORS["token"]


def test_pyjwt_verifies_the_vector_with_its_jwks_alone() -> None:
    assert jwt.get_unverified_header(VECTORS["token"]) == VECTORS["header"]
    key = jwt.PyJWKSet.from_dict(KEYS)[VECTORS["kid"]]
    claims = jwt.decode(VECTORS["token"], key, algorithms=["EdDSA"], audience="bank",
                        options={"verify_exp": False, "verify_iat": False})
    assert claims == CLAIMS


@pytest.mark.filterwarnings("ignore:EdDSA is deprecated via RFC 9864")
def test_joserfc_verifies_the_vector_with_its_jwks_alone() -> None:
    decoded = jose_jwt.decode(VECTORS["token"], KeySet.import_key_set(KEYS),
                              algorithms=["EdDSA"])
    assert dict(decoded.header) == VECTORS["header"]
    assert dict(decoded.claims) == CLAIMS


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: f"{c['verdict'][:40]}")
def test_each_case_has_its_documented_verdict(case: dict[str, Any]) -> None:
    text = (HERE / case["snapshot"]).read_text(encoding="utf-8")
    given = {"audience": case["audience"], "snapshot": text, "now": case["now"],
             "leeway": case["leeway"]}
    if case["verdict"] == "accepts":
        claims = verify(VECTORS["token"], KEYS, **given)
        assert claims.jti == "jti-vector-1"
        assert claims.kid == VECTORS["kid"]
    else:
        with pytest.raises(PermitRefused) as refused:
            verify(VECTORS["token"], KEYS, **given)
        assert refused.value.reason == case["verdict"]


def test_a_token_changed_by_one_character_does_not_verify() -> None:
    token = VECTORS["token"]
    forged = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    with pytest.raises(PermitRefused, match="does not verify"):
        verify(forged, KEYS, audience="bank", now=CLAIMS["iat"],
               snapshot=(HERE / VECTORS["snapshot_file"]).read_text(encoding="utf-8"))
