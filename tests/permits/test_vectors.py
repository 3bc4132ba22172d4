"""The permit-token test vectors (tests/vectors/permit_tokens/, docs/permit-tokens.md#test-vectors):
the token re-mints byte for byte from the documented inputs, and each case gets its documented
verdict from the pure verifier, with only the vectors' JWKS."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from protocols.auditseal import b64url_decode
from protocols.permit_tokens import (
    PermitRefused,
    mint_permit,
    snapshot_digest,
    verify_permit,
)

HERE = Path(__file__).resolve().parents[1] / "vectors" / "permit_tokens"
VECTORS = json.loads((HERE / "vectors.json").read_text(encoding="utf-8"))
KEYS = json.loads((HERE / VECTORS["keys"]).read_text(encoding="utf-8"))


def test_the_token_re_mints_from_the_documented_inputs() -> None:
    text = (HERE / VECTORS["snapshot_file"]).read_text(encoding="utf-8")
    assert snapshot_digest(text) == VECTORS["snapshot_digest"]
    assert (HERE / "token.txt").read_text(encoding="ascii").strip() == VECTORS["token"]
    key = Ed25519PrivateKey.from_private_bytes(b64url_decode(VECTORS["seed_b64url"]))
    assert mint_permit(kid=VECTORS["kid"], key=key, operation_id="op_vector_1",
                       digest=VECTORS["snapshot_digest"], destination="bank",
                       tenant="ten_vectors", issued_at=1_800_000_000, expires_at=1_800_000_075,
                       token_id="jti-vector-1") == VECTORS["token"]


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: f"{c['verdict'][:40]}")
def test_each_case_has_its_documented_verdict(case: dict[str, Any]) -> None:
    text = (HERE / case["snapshot"]).read_text(encoding="utf-8")
    verify = {"audience": case["audience"], "key": case["key"], "text": text, "now": case["now"]}
    if case["verdict"] == "accepts":
        permit = verify_permit(VECTORS["token"], KEYS, **verify)
        assert permit.claims["jti"] == "jti-vector-1"
        assert permit.snapshot["arguments"]["amount"] == "10.00"
    else:
        with pytest.raises(PermitRefused) as refused:
            verify_permit(VECTORS["token"], KEYS, **verify)
        assert refused.value.reason == case["verdict"]


def test_a_token_changed_by_one_character_does_not_verify() -> None:
    token = VECTORS["token"]
    forged = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    with pytest.raises(PermitRefused, match="does not verify"):
        verify_permit(forged, KEYS, audience="bank", key="op_vector_1", now=1_800_000_000,
                      text=(HERE / VECTORS["snapshot_file"]).read_text(encoding="utf-8"))
