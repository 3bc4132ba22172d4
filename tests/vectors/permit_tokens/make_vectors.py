"""Regenerate the permit-token vectors (deterministic: a fixed seed, fixed claims; Ed25519
signatures are deterministic). `PYTHONPATH=. python tests/vectors/permit_tokens/make_vectors.py`."""

from __future__ import annotations

import json
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from protocols.auditseal import b64url, jwk
from protocols.permit_tokens import mint_permit, snapshot_digest, snapshot_text

HERE = Path(__file__).parent
SEED = bytes(range(32))
KID = "vector-key-1"
OPERATION = "op_vector_1"
IAT, EXP = 1_800_000_000, 1_800_000_075

SNAPSHOT = {
    "operation": "payments.transfer", "contract_version": "1",
    "arguments": {"from_account": "acct-001", "to_account": "acct-999", "amount": "10.00",
                  "currency": "EUR", "memo": "Invoice 7 — März"},
    "destination": {"name": "bank", "address": "http://127.0.0.1:8026"},
}


def main() -> None:
    key = Ed25519PrivateKey.from_private_bytes(SEED)
    text = snapshot_text(SNAPSHOT)
    digest = snapshot_digest(text)
    token = mint_permit(kid=KID, key=key, operation_id=OPERATION, digest=digest,
                        destination="bank", tenant="ten_vectors", issued_at=IAT, expires_at=EXP,
                        token_id="jti-vector-1")
    altered = text.replace('"10.00"', '"9999.00"')
    # The inputs of `exact_console.permits.verify` (leeway: seconds of clock skew allowed).
    accept = {"audience": "bank", "snapshot": "snapshot.txt", "now": IAT, "leeway": 30}
    vectors = {
        "seed_b64url": b64url(SEED), "kid": KID, "keys": "keys.json",
        "snapshot_file": "snapshot.txt", "snapshot_digest": digest,
        "header": {"alg": "EdDSA", "kid": KID, "typ": "permit+jwt"},
        "claims": {"iss": "exact-console", "sub": OPERATION, "aud": "bank",
                   "tenant": "ten_vectors", "snapshot_digest": digest, "iat": IAT, "exp": EXP,
                   "jti": "jti-vector-1"},
        "token": token,
        "cases": [
            {**accept, "verdict": "accepts"},
            {**accept, "now": EXP + 29, "verdict": "accepts"},
            {**accept, "now": EXP + 30, "verdict": "the permit token has expired"},
            {**accept, "now": EXP, "leeway": 0, "verdict": "the permit token has expired"},
            {**accept, "now": IAT - 31, "verdict": "the permit token is issued in the future"},
            {**accept, "audience": "publisher",
             "verdict": "the permit token is for another destination ('bank')"},
            {**accept, "snapshot": "snapshot_altered.txt",
             "verdict": "the payload's digest differs from the permit token's"},
        ],
    }
    (HERE / "snapshot.txt").write_text(text, encoding="utf-8")
    (HERE / "snapshot_altered.txt").write_text(altered, encoding="utf-8")
    (HERE / "keys.json").write_text(json.dumps({"keys": [jwk(KID, key.public_key())]}, indent=2)
                                    + "\n", encoding="utf-8")
    (HERE / "token.txt").write_text(token + "\n", encoding="ascii")
    (HERE / "vectors.json").write_text(json.dumps(vectors, indent=2, ensure_ascii=False) + "\n",
                                       encoding="utf-8")


if __name__ == "__main__":
    main()
