"""`audit_prove EVENT_ID`: an event's inclusion proof verifies against its block's signed root."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from dispatch.models import AuditSeal
from dispatch.signing import signing_keys
from protocols.auditseal import event_digest, verify_block_signature, verify_proof
from tests.conftest import World


@pytest.mark.parametrize("seq", [1, 5, 8, 15])
def test_an_events_proof_reaches_its_signed_block_root(sealed: World, seq: int) -> None:
    seal = AuditSeal.objects.get(tenant_id=sealed.owner.tenant.id, seq=seq)
    out = StringIO()
    call_command("audit_prove", str(seal.event_id), stdout=out)
    proof = json.loads(out.getvalue())
    assert proof["event"]["id"] == seal.event_id and proof["block"]["block"] == seal.block
    assert event_digest(proof["event"]) == proof["event_digest"] == seal.digest
    assert verify_proof(proof["event_digest"], proof["proof"], proof["block"]["root"])
    keys = {k.kid: k.public for k in signing_keys()}
    assert verify_block_signature(proof["block"], keys)
    # Another event's digest does not fit this path.
    other = AuditSeal.objects.get(tenant_id=sealed.owner.tenant.id, seq=seq % 15 + 1)
    assert not verify_proof(other.digest, proof["proof"], proof["block"]["root"])


def test_an_unsealed_event_has_no_proof(sealed: World) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("audit_prove", "999999999")
    assert "not sealed yet" in str(raised.value)
