"""The audit-seal test vectors (tests/vectors/audit_seal/, docs/audit-seal.md#test-vectors)
verify as documented, through the command a user runs and the pure verifier."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from protocols.auditseal import (
    block_digest,
    event_digest,
    merkle_root,
    public_keys_from_jwks,
    verify_export,
    verify_proof,
)

HERE = Path(__file__).resolve().parents[1] / "vectors" / "audit_seal"
VERDICTS = json.loads((HERE / "verdicts.json").read_text())


@pytest.mark.parametrize(("name", "verdict"), sorted(VERDICTS["files"].items()))
def test_each_vector_file_has_its_documented_verdict(name: str, verdict: str) -> None:
    path, keys = HERE / name, HERE / VERDICTS["keys"]
    if verdict == "verifies":
        call_command("audit_verify", "--file", str(path), "--keys", str(keys))
    else:
        with pytest.raises(CommandError) as raised:
            call_command("audit_verify", "--file", str(path), "--keys", str(keys))
        assert raised.value.returncode == 1


@pytest.mark.parametrize(("name", "verdict"), sorted(VERDICTS["checkpoints"].items()))
def test_each_checkpoint_vector_has_its_documented_verdict(name: str, verdict: str) -> None:
    args = ["--file", str(HERE / "export.jsonl"), "--keys", str(HERE / VERDICTS["keys"]),
            "--checkpoint", str(HERE / name)]
    if verdict == "verifies":
        call_command("audit_verify", *args)
    else:
        with pytest.raises(CommandError) as raised:
            call_command("audit_verify", *args)
        assert raised.value.returncode == 1


def test_digests_merkle_root_and_proof_match_the_vectors() -> None:
    records = [json.loads(line) for line in (HERE / "export.jsonl").read_text().splitlines()]
    for record in records:
        kind = record.pop("type")
        if kind == "event":
            assert event_digest(record) == VERDICTS["event_digests"][str(record["id"])]
        elif kind == "block":
            assert block_digest(record) == VERDICTS["block_digests"][str(record["block"])]
    merkle = VERDICTS["merkle"]
    assert merkle_root(merkle["leaves"]) == merkle["root"]
    assert verify_proof(merkle["leaves"][2], merkle["proof_of_leaf_2"], merkle["root"])
    assert not verify_proof(merkle["leaves"][1], merkle["proof_of_leaf_2"], merkle["root"])
    jwks = json.loads((HERE / "keys.json").read_text())
    assert list(public_keys_from_jwks(jwks)) == ["vector-key-1"]
    assert verify_export((HERE / "export.jsonl").read_text(encoding="utf-8"), jwks) is None
