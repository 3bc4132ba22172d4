"""Signed permit tokens (docs/permit-tokens.md): the demo bank verifies the token each attempt
carries and refuses, as a definite failure with no effect, a payload altered after the claim, a
replayed token, another destination's token and an expired one; after a key rotation, tokens of
the old key verify until they expire and new tokens use the new key. On SQLite and PostgreSQL,
against the destinations as a real subprocess, the worker in a process of its own."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from demo.destinations.bank_client import bank_transfer
from demo.destinations.http_client import Permit
from demo.destinations.publisher_client import publish
from demo.destinations.runner import list_all
from dispatch import signing
from dispatch.handlers import DefiniteFailure
from dispatch.models import Attempt, Operation
from dispatch.runtime import get_runtime
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.permit_tokens import permit_token
from protocols.auditseal import b64url, b64url_decode
from protocols.permit_tokens import mint_permit, snapshot_digest, snapshot_text
from tests.conftest import World, make_world
from tests.support.destinations import Destinations, running_destinations
from tests.support.processes import ROOT, child_env

pytestmark = pytest.mark.django_db(transaction=True)

OLD = {"kid": "permit-old", "private": b64url(bytes(range(32)))}
NEW = {"kid": "permit-new", "private": b64url(bytes(range(1, 33)))}


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    return tmp_path / "console-keys.json"


def publish_keys(keys_file: Path) -> None:
    """What an operator does on a rotation: save `GET /api/v1/keys/` for the destinations."""
    keys_file.write_text(json.dumps(signing.jwks()), encoding="utf-8")


def use_keys(*entries: dict[str, str]) -> Any:
    signing.signing_keys.cache_clear()
    return override_settings(SIGNING_KEYS=json.dumps(list(entries)))


@pytest.fixture
def bank(tmp_path: Path, keys_file: Path, settings: Any) -> Iterator[Destinations]:
    """The destinations, the bank verifying against `keys_file` (the old key only, at first).
    Both settings go through pytest-django's `settings`, which restores them in order: an
    `override_settings` around `settings.DESTINATIONS = ...` would be captured by it and
    restored after the test, leaking the old key into every later test of the session."""
    settings.SIGNING_KEYS = json.dumps([OLD])
    publish_keys(keys_file)
    with running_destinations(tmp_path / "destinations", keys=keys_file) as found:
        settings.DESTINATIONS = found.settings()
        yield found


def claimed(world: World, amount: str = "10.00") -> Operation:
    proposal = world.propose_transfer(amount=amount)
    world.grant(proposal)
    return proposal_dispatch(principal=world.owner, proposal_id=proposal.id,
                             now=timezone.now(), enqueue=False)


def transfer(bank: Destinations, operation: Operation, token: str,
             **changed: str) -> dict[str, Any]:
    """What the payments handler sends for `operation`, carrying `token`."""
    proposal = operation.proposal
    arguments = {**json.loads(proposal.canonical)["arguments"], **changed}
    return bank_transfer(bank.bank_url, key=operation.id, timeout=5,
                         permit=Permit(token, proposal.canonical),
                         **{name: arguments[name] for name in (
                             "from_account", "to_account", "amount", "currency", "memo")})


def refused(bank: Destinations, operation: Operation, token: str, **changed: str) -> str:
    with pytest.raises(DefiniteFailure) as failure:
        transfer(bank, operation, token, **changed)
    assert "403" in failure.value.reason, failure.value.reason
    return failure.value.reason


def token(operation: Operation, **claims: Any) -> str:
    """A token as the dispatcher mints it, with `claims` changed (signed by the current key)."""
    key = signing.current_key()
    now = int(time.time())
    given: dict[str, Any] = {"operation_id": operation.id, "digest": operation.proposal.digest,
                             "destination": "bank", "tenant": operation.tenant_id,
                             "issued_at": now, "expires_at": now + 60, "token_id": f"t-{now}"}
    return mint_permit(kid=key.kid, key=key.private, **{**given, **claims})


def contract_of(operation: Operation) -> Any:
    return get_runtime().contract(operation.operation)


def test_a_worker_that_alters_the_payload_after_the_claim_is_refused_no_effect(
        bank: Destinations) -> None:
    operation = claimed(make_world(timezone.now()), amount="12.00")
    env = child_env(SIGNING_KEYS=json.dumps([OLD]), DISPATCH_TAMPER_AT="attempt.payload",
                    DISPATCH_TAMPER_ARGUMENTS=json.dumps({"amount": "9999.00"}))
    done = subprocess.run([sys.executable, "-m", "tests.support.child", "execute", operation.id],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"state": "failed_no_effect"}
    assert Operation.objects.get(id=operation.id).state == "failed_no_effect"
    (attempt,) = Attempt.objects.filter(operation_id=operation.id)
    assert attempt.outcome == "failed_no_effect"
    assert "permit refused: the payload's digest differs" in attempt.error, attempt.error
    assert list_all(bank.directory)["bank"] == []  # nothing transferred


def test_the_untampered_attempt_carries_a_token_the_bank_accepts(bank: Destinations) -> None:
    operation = claimed(make_world(timezone.now()))
    env = child_env(SIGNING_KEYS=json.dumps([OLD]))
    done = subprocess.run([sys.executable, "-m", "tests.support.child", "execute", operation.id],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert json.loads(done.stdout) == {"state": "completed"}, done.stderr
    assert [t["key"] for t in list_all(bank.directory)["bank"]] == [operation.id]


def test_the_original_snapshot_with_other_fields_is_refused(bank: Destinations) -> None:
    operation = claimed(make_world(timezone.now()))
    with use_keys(OLD):
        minted = permit_token(operation, contract_of(operation))
    assert "differs from the approved snapshot" in refused(bank, operation, minted,
                                                           to_account="acct-666")
    assert list_all(bank.directory)["bank"] == []


def test_a_replayed_token_is_refused(bank: Destinations) -> None:
    operation = claimed(make_world(timezone.now()))
    with use_keys(OLD):
        minted = permit_token(operation, contract_of(operation))
    assert transfer(bank, operation, minted)["key"] == operation.id
    # The same key with a fresh token is the bank's deduplication (200, nothing new); the same
    # token again is a replay.
    assert "replayed" in refused(bank, operation, minted)
    with use_keys(OLD):
        assert transfer(bank, operation, permit_token(operation, contract_of(operation)))
    assert len(list_all(bank.directory)["bank"]) == 1


def test_another_destinations_token_and_an_expired_one_are_refused(bank: Destinations) -> None:
    operation = claimed(make_world(timezone.now()))
    with use_keys(OLD):
        for_publisher = token(operation, destination="publisher")
        # Past its expiry by more than the 30 s of clock skew a destination allows.
        expired = token(operation, expires_at=int(time.time()) - 31, token_id="t-expired")
        other_operation = token(operation, operation_id="op_other", token_id="t-other")
    assert "for another destination ('publisher')" in refused(bank, operation, for_publisher)
    assert "expired" in refused(bank, operation, expired)
    assert "for another operation" in refused(bank, operation, other_operation)
    assert "no permit token" in refused(bank, operation, "")
    assert list_all(bank.directory)["bank"] == []
    # The bank's own token, sent to the publisher beside it, is another destination's there.
    with use_keys(OLD):
        minted = permit_token(operation, contract_of(operation))
    with pytest.raises(DefiniteFailure, match=r"403 permit refused: the permit token is for "
                                              r"another destination \('bank'\)"):
        publish(bank.publisher_url, key=operation.id, report_id="rep_1", revision=1,
                digest="sha256:" + "0" * 64, title="t", body="b", timeout=5,
                permit=Permit(minted, operation.proposal.canonical))
    assert list_all(bank.directory)["publications"] == []


def test_after_a_rotation_old_tokens_verify_until_they_expire_new_ones_use_the_new_key(
        bank: Destinations, keys_file: Path) -> None:
    world = make_world(timezone.now())
    first, second, third = claimed(world), claimed(world), claimed(world)
    with use_keys(OLD):
        old_token = permit_token(first, contract_of(first))
        # Expired, by more than the destinations' 30 s of clock-skew leeway.
        short = token(third, issued_at=int(time.time()) - 120,
                      expires_at=int(time.time()) - 31, token_id="t-short")
    # Rotation: the new key first, the old one kept; the destinations get the new JWKS.
    with use_keys(NEW, OLD):
        publish_keys(keys_file)
        new_token = permit_token(second, contract_of(second))
        assert [k["kid"] for k in signing.jwks()["keys"]] == ["permit-new", "permit-old"]
    assert json.loads(b64url_header(new_token))["kid"] == "permit-new"
    assert json.loads(b64url_header(old_token))["kid"] == "permit-old"
    assert transfer(bank, first, old_token)["key"] == first.id  # the old key's, unexpired
    assert transfer(bank, second, new_token)["key"] == second.id
    assert "expired" in refused(bank, third, short)  # the old key's, expired
    # Once the old key's tokens have all expired, it may leave the JWKS: its tokens then fail.
    with use_keys(NEW):
        publish_keys(keys_file)
    assert "unknown key ('permit-old')" in refused(bank, third, short)
    assert sorted(t["key"] for t in list_all(bank.directory)["bank"]) == sorted(
        [first.id, second.id])


def b64url_header(compact: str) -> bytes:
    return b64url_decode(compact.split(".")[0])


def test_a_snapshot_of_another_operation_with_the_same_fields_is_refused(
        bank: Destinations) -> None:
    """A validly signed token for the bank whose snapshot approves another contract with the
    transfer's field names is not a transfer's permit."""
    operation = claimed(make_world(timezone.now()))
    snapshot = {**json.loads(operation.proposal.canonical), "operation": "ledger.credit"}
    text = snapshot_text(snapshot)
    with use_keys(OLD):
        forged = token(operation, digest=snapshot_digest(text), token_id="t-other-op")
    arguments = snapshot["arguments"]
    with pytest.raises(DefiniteFailure) as failure:
        bank_transfer(bank.bank_url, key=operation.id, timeout=5, permit=Permit(forged, text),
                      **{name: arguments[name] for name in (
                          "from_account", "to_account", "amount", "currency", "memo")})
    assert "not a payments.transfer request" in failure.value.reason, failure.value.reason
    assert list_all(bank.directory)["bank"] == []
