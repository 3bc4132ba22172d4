"""Checkpoints of the sealed audit (docs/audit-seal.md#checkpoints), pure: the signed bytes, the
signature check that refuses any change of a member or of the shape, and the comparison of a
checkpoint with the chain that names the block."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from protocols.auditseal import (
    GENESIS,
    b64url_decode,
    check_checkpoints,
    parse_checkpoints,
    sign_block,
    sign_checkpoint,
    verify_block_signature,
    verify_checkpoint_signature,
)
from protocols.canonical import canonicalize

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
KEYS = {"k2": KEY.public_key()}
DIGEST = "sha256:" + "ab" * 32


def checkpoint(block: int = 3, digest: str = DIGEST) -> dict[str, Any]:
    return sign_checkpoint(tenant="ten_a", block=block, digest=digest,
                           sealed_at="2026-01-01T00:00:00.000000Z", kid="k2", key=KEY)


def test_the_signed_bytes_are_canon_of_the_checkpoint_without_its_signature() -> None:
    signed = checkpoint()
    assert list(signed) == ["tenant", "block", "digest", "sealed_at", "kid", "signature"]
    KEY.public_key().verify(b64url_decode(signed["signature"]), canonicalize(
        {k: v for k, v in signed.items() if k != "signature"}))
    assert verify_checkpoint_signature(signed, KEYS)


@pytest.mark.parametrize("change", [
    {"tenant": "ten_b"}, {"block": 4}, {"digest": GENESIS},
    {"sealed_at": "2026-01-01T00:00:00.000001Z"}, {"kid": "k1"}, {"block": True},
    {"block": "3"}, {"extra": 1},
])
def test_any_change_of_a_checkpoint_breaks_its_signature(change: dict[str, Any]) -> None:
    assert not verify_checkpoint_signature({**checkpoint(), **change}, KEYS)


@pytest.mark.parametrize("shape", [None, [], "x", {}])
def test_what_is_not_a_checkpoint_is_refused(shape: object) -> None:
    assert not verify_checkpoint_signature(shape, KEYS)


def test_a_block_signature_is_no_checkpoint_signature_nor_the_reverse() -> None:
    signed = checkpoint()
    block = {"tenant": "ten_a", "block": 3, "from_seq": 1, "to_seq": 2, "root": DIGEST,
             "prev": GENESIS, "sealed_at": signed["sealed_at"]}
    block["signature"] = {"kid": "k2", "alg": "EdDSA", "sig": signed["signature"]}
    assert not verify_block_signature(block, KEYS)
    block["signature"] = sign_block(block, "k2", KEY)
    assert not verify_checkpoint_signature({**signed, "signature": block["signature"]["sig"]},
                                           KEYS)


def test_the_chain_must_hold_each_checkpoints_block_with_its_digest() -> None:
    chain = {1: "sha256:" + "01" * 32, 2: DIGEST}
    held = [checkpoint(1, chain[1]), checkpoint(2, chain[2])]
    assert check_checkpoints(held, KEYS, lambda tenant, n: chain.get(n)) is None
    missing = check_checkpoints([*held, checkpoint(3)], KEYS, lambda tenant, n: chain.get(n))
    assert missing is not None
    assert "block 3: missing" in missing
    rewritten = check_checkpoints([checkpoint(2, GENESIS)], KEYS,
                                  lambda tenant, n: chain.get(n))
    assert rewritten is not None
    assert "block 2: its digest differs" in rewritten


def test_a_checkpoint_file_is_one_json_or_json_lines() -> None:
    one = checkpoint()
    assert parse_checkpoints(json.dumps(one, indent=2)) == [one]
    assert parse_checkpoints(json.dumps(one) + "\n" + json.dumps(one) + "\n") == [one, one]
    with pytest.raises(ValueError, match="line 2"):
        parse_checkpoints(json.dumps(one) + "\n{")
    with pytest.raises(ValueError, match="twice"):
        parse_checkpoints('{"a": 1, "a": 2}\n{"b": 1}')
