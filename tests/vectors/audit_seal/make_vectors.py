"""Regenerate the audit-seal vectors (deterministic: a fixed seed, fixed events; Ed25519
signatures are deterministic). `PYTHONPATH=. python tests/vectors/audit_seal/make_vectors.py`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from protocols.auditseal import (
    GENESIS,
    b64url,
    block_digest,
    event_digest,
    jwk,
    merkle_proof,
    merkle_root,
    sign_block,
    sign_checkpoint,
)
from protocols.canonical import canonicalize

HERE = Path(__file__).parent
SEED = bytes(range(32))
KID = "vector-key-1"
TENANT = "ten_vectors"


def line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def main() -> None:
    key = Ed25519PrivateKey.from_private_bytes(SEED)
    events = [{"id": 100 + n, "tenant": TENANT, "seq": n + 1,
               "at": f"2026-01-01T00:00:0{n}.000000Z", "kind": "proposal.created",
               "actor": "agent", "operation_id": "", "proposal_id": f"prp_{n}",
               "digest": "", "details": {"n": n, "amount": 1.5, "note": "café"}}
              for n in range(5)]
    blocks = []
    prev = GENESIS
    for number, (lo, hi) in enumerate([(0, 3), (3, 5)], 1):
        chunk = events[lo:hi]
        block = {"tenant": TENANT, "block": number, "from_seq": lo + 1, "to_seq": hi,
                 "root": merkle_root([event_digest(e) for e in chunk]), "prev": prev,
                 "sealed_at": f"2026-01-01T00:01:0{number}.000000Z"}
        block["signature"] = sign_block(block, KID, key)
        prev = block_digest(block)
        blocks.append(block)
    header = {"type": "export", "format": "audit-seal/1", "tenant": TENANT, "since": None,
              "prev": GENESIS}
    good = line(header) + "".join(line({"type": "event", **e}) for e in events) + \
        "".join(line({"type": "block", **b}) for b in blocks)
    (HERE / "export.jsonl").write_text(good, encoding="utf-8")
    (HERE / "keys.json").write_text(json.dumps(
        {"keys": [jwk(KID, key.public_key())]}, indent=2) + "\n")
    tampered = {
        "event_changed.jsonl": good.replace('"prp_1"', '"prp_9"'),
        "event_removed.jsonl": "".join(x for x in good.splitlines(True) if '"id":102,' not in x),
        "block_removed.jsonl": "".join(x for x in good.splitlines(True)
                                       if '"type":"block","tenant":"ten_vectors","block":1,'
                                       not in x),
        "root_changed.jsonl": good.replace(blocks[1]["root"], "sha256:" + "0" * 64),
    }
    for name, text in tampered.items():
        assert text != good, name
        (HERE / name).write_text(text, encoding="utf-8")
    checkpoints = [sign_checkpoint(tenant=TENANT, block=b["block"], digest=block_digest(b),
                                   sealed_at=b["sealed_at"], kid=KID, key=key) for b in blocks]
    # As the sealer writes its log: each line `canon/1` of one checkpoint.
    (HERE / "checkpoints.jsonl").write_bytes(b"".join(canonicalize(c) + b"\n"
                                                      for c in checkpoints))
    ahead = sign_checkpoint(tenant=TENANT, block=3, digest="sha256:" + "3" * 64,
                            sealed_at="2026-01-01T00:01:03.000000Z", kid=KID, key=key)
    (HERE / "checkpoint_ahead.json").write_text(json.dumps(ahead, indent=2) + "\n")
    rewritten = sign_checkpoint(tenant=TENANT, block=2, digest="sha256:" + "2" * 64,
                                sealed_at=blocks[1]["sealed_at"], kid=KID, key=key)
    (HERE / "checkpoint_rewritten.json").write_text(json.dumps(rewritten, indent=2) + "\n")
    forged = {**checkpoints[1], "block": 1}
    (HERE / "checkpoint_forged.json").write_text(json.dumps(forged, indent=2) + "\n")
    digests = [event_digest(e) for e in events[:3]]
    verdicts = {
        "format": "audit-seal/1 vectors",
        "keys": "keys.json",
        "seed_b64url": b64url(SEED),
        "files": {"export.jsonl": "verifies", **dict.fromkeys(tampered, "fails")},
        "checkpoints": {"checkpoints.jsonl": "verifies", "checkpoint_ahead.json": "fails",
                        "checkpoint_rewritten.json": "fails", "checkpoint_forged.json": "fails"},
        "event_digests": {str(e["id"]): event_digest(e) for e in events},
        "block_digests": {str(b["block"]): block_digest(b) for b in blocks},
        "merkle": {"leaves": digests, "root": merkle_root(digests),
                   "proof_of_leaf_2": merkle_proof(digests, 2)},
    }
    (HERE / "verdicts.json").write_text(json.dumps(verdicts, indent=2) + "\n")


if __name__ == "__main__":
    main()
