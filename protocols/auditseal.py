"""The sealed audit's format (docs/audit-seal.md): event digests, the Merkle root, block digests,
Ed25519 signatures, JWKS, and the verification of an exported JSON Lines file.

Pure: no Django, no database. A verifier in another language needs only docs/audit-seal.md.

- An event's canonical digest is SHA-256 of `canon/1` of its stored fields
  `{"id","tenant","seq","at","kind","actor","operation_id","proposal_id","digest","details"}`.
- Merkle (RFC 6962 style): leaf = SHA-256(0x00 || event digest bytes), node = SHA-256(0x01 ||
  left || right); a level of odd length promotes its last node unchanged to the next level.
- A block's signature input is `canon/1` of the block without `signature`; the block digest
  (the next block's `prev`) is SHA-256 of `canon/1` of the whole block, signature included.
- A checkpoint (docs/audit-seal.md#checkpoints: the head, anchored outside the database) is
  `{"tenant","block","digest","sealed_at","kid","signature"}`: the tenant's last block's number,
  its block digest and `sealed_at`, as the sealer published them. Its signature input is
  `canon/1` of the checkpoint without `signature` (so `kid` is signed); `signature` is the
  unpadded base64url Ed25519 signature of those bytes by the key `kid`. A checkpoint's members
  differ from a block's (`digest`, no `root`), so neither signature can pass for the other.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from protocols.canonical import canonicalize

__all__ = [
    "CHECKPOINT_FIELDS", "EVENT_FIELDS", "GENESIS", "b64url", "b64url_decode", "block_digest",
    "check_checkpoints", "checkpoint_problem", "event_digest", "jwk", "merkle_proof",
    "merkle_root", "parse_checkpoints", "public_keys_from_jwks", "sign_block", "sign_checkpoint",
    "verify_block_signature", "verify_checkpoint_signature", "verify_export", "verify_proof",
]

EVENT_FIELDS: Final = ("id", "tenant", "seq", "at", "kind", "actor", "operation_id",
                       "proposal_id", "digest", "details")
CHECKPOINT_FIELDS: Final = ("tenant", "block", "digest", "sealed_at", "kid", "signature")
#: The `prev` of a tenant's first block.
GENESIS: Final = "sha256:" + "0" * 64


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Strict: unpadded base64url whose unused bits are zero (one text per byte string)."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if b64url(raw) != text:
        raise ValueError("not canonical unpadded base64url")
    return raw


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _hex(raw: bytes) -> str:
    return "sha256:" + raw.hex()


def event_digest(event: Mapping[str, Any]) -> str:
    """`sha256:<hex>` of `canon/1` of the event's sealed fields (exactly EVENT_FIELDS)."""
    return _hex(_sha(canonicalize({name: event[name] for name in EVENT_FIELDS})))


def _raw(digest: str) -> bytes:
    if not digest.startswith("sha256:") or len(digest) != 71:
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return bytes.fromhex(digest[7:])


def _levels(digests: Sequence[str]) -> list[list[bytes]]:
    if not digests:
        raise ValueError("a block holds at least one event")
    level = [_sha(b"\x00" + _raw(d)) for d in digests]
    levels = [level]
    while len(level) > 1:
        nxt = [_sha(b"\x01" + level[i] + level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
        levels.append(level)
    return levels


def merkle_root(digests: Sequence[str]) -> str:
    return _hex(_levels(digests)[-1][0])


def merkle_proof(digests: Sequence[str], index: int) -> list[dict[str, str]]:
    """The audit path of leaf `index`: each step the sibling and its side ("left"/"right")."""
    path: list[dict[str, str]] = []
    for level in _levels(digests)[:-1]:
        sibling = index ^ 1
        if sibling < len(level):
            path.append({"side": "left" if sibling < index else "right",
                         "hash": _hex(level[sibling])})
        index //= 2
    return path


def verify_proof(event_digest_: str, path: Iterable[Mapping[str, str]], root: str) -> bool:
    node = _sha(b"\x00" + _raw(event_digest_))
    for step in path:
        other = _raw(step["hash"])
        node = _sha(b"\x01" + (other + node if step["side"] == "left" else node + other))
    return _hex(node) == root


def _unsigned(block: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "signature"}


def sign_block(block: Mapping[str, Any], kid: str, key: Ed25519PrivateKey) -> dict[str, str]:
    signature = key.sign(canonicalize(_unsigned(block)))
    return {"kid": kid, "alg": "EdDSA", "sig": b64url(signature)}


def verify_block_signature(block: Mapping[str, Any],
                           keys: Mapping[str, Ed25519PublicKey]) -> bool:
    signature = block.get("signature")
    if not isinstance(signature, dict) or signature.get("kid") not in keys:
        return False
    try:
        keys[signature["kid"]].verify(b64url_decode(signature["sig"]),
                                      canonicalize(_unsigned(block)))
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def block_digest(block: Mapping[str, Any]) -> str:
    return _hex(_sha(canonicalize(dict(block))))


def jwk(kid: str, public: Ed25519PublicKey) -> dict[str, str]:
    raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return {"kty": "OKP", "crv": "Ed25519", "x": b64url(raw), "kid": kid, "use": "sig",
            "alg": "EdDSA"}


def public_keys_from_jwks(jwks: Mapping[str, Any]) -> dict[str, Ed25519PublicKey]:
    keys: dict[str, Ed25519PublicKey] = {}
    for entry in jwks.get("keys", []):
        if entry.get("kty") == "OKP" and entry.get("crv") == "Ed25519":
            keys[entry["kid"]] = Ed25519PublicKey.from_public_bytes(b64url_decode(entry["x"]))
    return keys


def check_chain(events: Sequence[Mapping[str, Any]], blocks: Sequence[Mapping[str, Any]],
                keys: Mapping[str, Ed25519PublicKey], *, prev: str = GENESIS) -> str | None:
    """None when the blocks chain and cover the events exactly; else the first problem found.

    `events` are one tenant's sealed events in seq order, `blocks` its blocks in order; the first
    block's `prev` must equal `prev` (GENESIS for a whole chain).
    """
    by_seq: dict[int, Mapping[str, Any]] = {}
    for event in events:
        seq = event["seq"]
        if seq in by_seq:
            return f"event {event['id']}: seq {seq} appears twice (inserted)"
        by_seq[seq] = event
    expected_block = blocks[0]["block"] if blocks else 1
    expected_from = blocks[0]["from_seq"] if blocks else 1
    for block in blocks:
        name = f"block {block.get('block')}"
        if block.get("block") != expected_block:
            return f"block {expected_block}: missing (next found is {name})"
        if block.get("prev") != prev:
            return f"{name}: prev does not match the previous block's digest (a block removed " \
                   "or changed before it)"
        if not verify_block_signature(block, keys):
            return f"{name}: bad signature (the block was changed or not signed by these keys)"
        if block["from_seq"] != expected_from:
            return f"{name}: starts at seq {block['from_seq']}, expected {expected_from}"
        digests = []
        for seq in range(block["from_seq"], block["to_seq"] + 1):
            found = by_seq.get(seq)
            if found is None:
                return f"{name}: event seq {seq} is missing (removed)"
            if found["tenant"] != block["tenant"]:
                return f"event {found['id']}: tenant does not match {name}"
            digests.append(event_digest(found))
        if merkle_root(digests) != block["root"]:
            return f"{name}: root does not match its events (an event changed, or the root)"
        prev = block_digest(block)
        expected_block += 1
        expected_from = block["to_seq"] + 1
    extra = [e for e in events if e["seq"] >= expected_from or e["seq"] < (
        blocks[0]["from_seq"] if blocks else 1)]
    if extra:
        return f"event {extra[0]['id']}: seq {extra[0]['seq']} is in no block (inserted)"
    return None


_SHAPES: Final = {
    "export": {"type", "format", "tenant", "since", "prev"},
    "event": {"type", *EVENT_FIELDS},
    "block": {"type", "tenant", "block", "from_seq", "to_seq", "root", "prev", "sealed_at",
              "signature"},
}


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    record = dict(pairs)
    if len(record) != len(pairs):
        raise ValueError("a key appears twice")
    return record


def verify_export(text: str, jwks: Mapping[str, Any],
                  checkpoints: Sequence[Mapping[str, Any]] = ()) -> str | None:
    """Verify an `audit_export` file's text with only the JWKS, and against `checkpoints` (of
    its tenant) when given. None when it verifies.

    Strict JSON Lines: records separated by "\n" only, the last one ended by it, no empty line.
    A checkpoint of a block before a partial export's first one cannot be checked against it
    (except the one just before, whose digest is the header's `prev`) and is passed over.
    """
    keys = public_keys_from_jwks(jwks)
    if not text.endswith("\n"):
        return "the file does not end with a newline"
    lines = text[:-1].split("\n")
    events: list[dict[str, Any]] = []
    blocks: list[dict[str, Any]] = []
    header: dict[str, Any] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line != line.strip():
            return f"line {number}: empty, or white space around the record"
        try:
            record = json.loads(line, object_pairs_hook=_no_duplicates)
        except ValueError:
            return f"line {number}: not JSON (or a key twice)"
        shape = _SHAPES.get(str(record.get("type"))) if isinstance(record, dict) else None
        if shape is None or set(record) != shape:
            return f"line {number}: not an export, event or block record"
        if record["type"] == "block" and (not isinstance(record["signature"], dict) or set(
                record["signature"]) != {"kid", "alg", "sig"} or
                record["signature"]["alg"] != "EdDSA"):
            return f"line {number}: malformed signature"
        kind = record.pop("type", None)
        if kind == "export":
            header = record
        elif kind == "event":
            events.append(record)
        elif kind == "block":
            blocks.append(record)
        else:
            return f"line {number}: unknown record type {kind!r}"
    if not header:
        return "no export header"
    if header.get("format") != "audit-seal/1":
        return f"unknown export format {header.get('format')!r}"
    tenant = header.get("tenant")
    for record in [*events, *blocks]:
        if record.get("tenant") != tenant:
            return f"a record of tenant {record.get('tenant')!r} in an export of {tenant!r}"
    events.sort(key=lambda e: e.get("seq", 0))
    try:
        problem = check_chain(events, blocks, keys, prev=header.get("prev", GENESIS))
        digests = {block["block"]: block_digest(block) for block in blocks}
    except (KeyError, TypeError, ValueError) as exc:
        return f"malformed record: {exc!r}"
    if problem:
        return problem
    first = blocks[0]["block"] if blocks else 1
    digests[first - 1] = header.get("prev", GENESIS)

    def digest_of(of_tenant: str, number: int) -> str | None:
        if of_tenant != tenant:
            return None
        return digests.get(number, None if number >= first else "")

    return check_checkpoints(checkpoints, keys, digest_of)


# --- checkpoints: the head, published outside the database -------------------------------------


def _checkpoint_input(checkpoint: Mapping[str, Any]) -> bytes:
    return canonicalize({name: checkpoint[name] for name in CHECKPOINT_FIELDS
                         if name != "signature"})


def sign_checkpoint(*, tenant: str, block: int, digest: str, sealed_at: str, kid: str,
                    key: Ed25519PrivateKey) -> dict[str, Any]:
    """The signed checkpoint of a tenant's head: its last block `block` has digest `digest`."""
    checkpoint: dict[str, Any] = {"tenant": tenant, "block": block, "digest": digest,
                                  "sealed_at": sealed_at, "kid": kid}
    checkpoint["signature"] = b64url(key.sign(_checkpoint_input(checkpoint)))
    return checkpoint


def verify_checkpoint_signature(checkpoint: object,
                                keys: Mapping[str, Ed25519PublicKey]) -> bool:
    """True when `checkpoint` (as read from JSON: anything) has exactly a checkpoint's members,
    of their types, and its signature verifies under its `kid` among `keys`."""
    if not isinstance(checkpoint, Mapping) or set(checkpoint) != set(CHECKPOINT_FIELDS):
        return False
    block = checkpoint["block"]
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        return False
    if not all(isinstance(checkpoint[name], str) for name in CHECKPOINT_FIELDS
               if name != "block"):
        return False
    if checkpoint["kid"] not in keys:
        return False
    try:
        keys[checkpoint["kid"]].verify(b64url_decode(checkpoint["signature"]),
                                       _checkpoint_input(checkpoint))
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def checkpoint_problem(checkpoint: Mapping[str, Any], digest_in_chain: str | None) -> str | None:
    """None when the chain holds the checkpoint's block with its digest; else what is wrong,
    naming the block. `digest_in_chain` is None when the chain has no such block."""
    name = f"block {checkpoint['block']}"
    when = f"the checkpoint sealed at {checkpoint['sealed_at']}"
    if digest_in_chain is None:
        return f"{name}: missing from the chain ({when} names it: removed)"
    if not hmac.compare_digest(digest_in_chain.encode(), str(checkpoint["digest"]).encode()):
        return f"{name}: its digest differs from {when}'s (the block was rewritten)"
    return None


def check_checkpoints(checkpoints: Iterable[Mapping[str, Any]],
                      keys: Mapping[str, Ed25519PublicKey],
                      digest_of: Callable[[str, int], str | None]) -> str | None:
    """The first checkpoint that is not signed by `keys`, or whose block the chain lacks or
    holds with another digest; None when there is none. `digest_of(tenant, block)` answers the
    chain's digest of that block, None when it has none, "" when it cannot tell (skipped)."""
    for number, checkpoint in enumerate(checkpoints, 1):
        if not verify_checkpoint_signature(checkpoint, keys):
            return f"checkpoint {number}: bad signature, or not a checkpoint (not signed by " \
                   "these keys)"
        digest = digest_of(checkpoint["tenant"], checkpoint["block"])
        if digest == "":
            continue
        problem = checkpoint_problem(checkpoint, digest)
        if problem:
            return f"tenant {checkpoint['tenant']}: {problem}"
    return None


def parse_checkpoints(text: str) -> list[dict[str, Any]]:
    """One checkpoint's JSON, or a checkpoint log (JSON Lines, one checkpoint a line, empty
    lines ignored). ValueError naming the line when a line is not a JSON object."""
    stripped = text.strip()
    if not stripped:
        raise ValueError("no checkpoint in the file")
    try:
        whole = json.loads(stripped, object_pairs_hook=_no_duplicates)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        return [whole]
    found: list[dict[str, Any]] = []
    for number, line in enumerate(stripped.split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line, object_pairs_hook=_no_duplicates)
        except ValueError:
            raise ValueError(f"line {number}: not JSON (or a key twice)") from None
        if not isinstance(record, dict):
            raise ValueError(f"line {number}: not a checkpoint")
        found.append(record)
    return found
