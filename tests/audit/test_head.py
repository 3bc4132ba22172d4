"""The head of a tenant's chain, anchored outside the database (docs/audit-seal.md#head): a real
sealer pass refuses to seal past a removed or rewritten head, or an event older than the newest
sealed one, and says so (audit event and metric); each pass publishes a signed checkpoint to the
checkpoint log, and `audit_verify --checkpoint` holds the chain to it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client

from dispatch.models import AuditBlock, AuditEvent, AuditHead, AuditSeal
from dispatch.services.sealer import block_record
from protocols.auditseal import b64url_decode, block_digest
from protocols.canonical import canonicalize
from tests.audit.conftest import add_events
from tests.audit.test_keys import SEED
from tests.conftest import World
from tests.support.metrics import samples, value

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT_KEYS = {"tenant", "block", "digest", "sealed_at", "kid", "signature"}


def sql(statement: str, *params: object) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def log_of(world: World) -> Path:
    return Path(settings.AUDIT_CHECKPOINT_DIR) / f"{world.owner.tenant.id}.jsonl"


def checkpoints(world: World) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log_of(world).read_text().splitlines()]


def remove_blocks(world: World, first: int) -> list[int]:
    """Raw SQL, as an attacker with database access: blocks `first..` and their seals go; the
    ids of the events they sealed are returned."""
    tenant = world.owner.tenant.id
    removed = list(AuditSeal.objects.filter(tenant_id=tenant, block__gte=first)
                   .values_list("event_id", flat=True))
    sql(f"DELETE FROM {AuditBlock._meta.db_table} WHERE tenant_id = %s AND number >= %s",
        tenant, first)
    sql(f"DELETE FROM {AuditSeal._meta.db_table} WHERE tenant_id = %s AND block >= %s",
        tenant, first)
    assert removed
    return removed


def alerts(world: World) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(tenant_id=world.owner.tenant.id,
                                          kind="audit.head_mismatch").order_by("id"))


def mismatch_gauge() -> float:
    response = Client().get("/metrics")
    assert response.status_code == 200, response.content
    return value(samples(response.content.decode()), "console_audit_head_mismatch")


def verify_fails(*args: str, words: str) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("audit_verify", *args)
    assert raised.value.returncode == 1
    assert words in str(raised.value), str(raised.value)


@pytest.mark.parametrize("new_events", [0, 2])
def test_removing_the_last_block_with_its_events_stops_the_sealer(
        sealed: World, now: datetime, new_events: int) -> None:
    name = sealed.owner.tenant.name
    for event_id in remove_blocks(sealed, 3):
        sql(f"DELETE FROM {AuditEvent._meta.db_table} WHERE id = %s", event_id)
    add_events(sealed, new_events, now - timedelta(minutes=1))
    assert mismatch_gauge() == 0
    call_command("audit_seal")
    assert list(AuditBlock.objects.filter(tenant_id=sealed.owner.tenant.id)
                .values_list("number", flat=True).order_by("number")) == [1, 2]
    [alert] = alerts(sealed)
    assert "block 3" in alert.details["problem"], alert.details
    assert mismatch_gauge() == 1
    call_command("audit_seal")  # still refused, and said once
    assert len(alerts(sealed)) == 1
    assert AuditBlock.objects.filter(tenant_id=sealed.owner.tenant.id).count() == 2
    verify_fails("--tenant", name, "--checkpoint", str(log_of(sealed)), words="block 3")


@pytest.mark.parametrize("head_row", ["left", "rewritten"])
def test_blocks_k_to_n_removed_and_their_events_edited_are_never_signed_again(
        sealed: World, tmp_path: Path, head_row: str) -> None:
    tenant = sealed.owner.tenant.id
    removed = remove_blocks(sealed, 2)
    for event_id in removed:
        sql(f"UPDATE {AuditEvent._meta.db_table} SET details = %s WHERE id = %s",
            '{"n": 99, "forged": true}', event_id)
    if head_row == "rewritten":  # the attacker moves the database's head back too
        first = AuditBlock.objects.get(tenant_id=tenant, number=1)
        sql(f"UPDATE {AuditHead._meta.db_table} SET block = 1, digest = %s WHERE tenant_id = %s",
            block_digest(block_record(first)), tenant)
    call_command("audit_seal")
    assert AuditBlock.objects.filter(tenant_id=tenant).count() == 1
    assert not AuditSeal.objects.filter(event_id__in=removed).exists()
    [alert] = alerts(sealed)
    assert "block" in alert.details["problem"]
    assert mismatch_gauge() == 1
    verify_fails("--tenant", sealed.owner.tenant.name, "--checkpoint", str(log_of(sealed)),
                 words="block 2")
    # Offline too: the export of what the database holds now, the keys, and the witness's log.
    out, keys = tmp_path / "audit.jsonl", tmp_path / "keys.json"
    call_command("audit_export", "--tenant", sealed.owner.tenant.name, "--out", str(out))
    keys.write_text(Client().get("/api/v1/keys/").content.decode())
    call_command("audit_verify", "--file", str(out), "--keys", str(keys))
    verify_fails("--file", str(out), "--keys", str(keys), "--checkpoint", str(log_of(sealed)),
                 words="block 2")


def test_an_event_older_than_the_newest_sealed_one_is_refused_and_said(
        sealed: World, now: datetime) -> None:
    add_events(sealed, 1, now - timedelta(minutes=9))  # back-dated between blocks 1 and 2
    injected = AuditEvent.objects.order_by("-id").first()
    assert injected is not None
    add_events(sealed, 2, now - timedelta(minutes=1))
    fresh = list(AuditEvent.objects.order_by("-id").values_list("id", flat=True)[:2])
    call_command("audit_seal")
    assert not AuditSeal.objects.filter(event_id=injected.pk).exists()
    assert AuditSeal.objects.filter(event_id__in=fresh).count() == 2  # the others go on
    [alert] = alerts(sealed)
    assert injected.pk in alert.details["events"], alert.details
    assert mismatch_gauge() == 1
    call_command("audit_seal")
    assert len(alerts(sealed)) == 1
    assert not AuditSeal.objects.filter(event_id=injected.pk).exists()


def test_a_removed_head_row_stops_the_sealer(sealed: World, now: datetime) -> None:
    sql(f"DELETE FROM {AuditHead._meta.db_table} WHERE tenant_id = %s", sealed.owner.tenant.id)
    verify_fails("--tenant", sealed.owner.tenant.name, words="block 3: the chain has no head")
    add_events(sealed, 1, now - timedelta(minutes=1))
    call_command("audit_seal")
    assert AuditBlock.objects.filter(tenant_id=sealed.owner.tenant.id).count() == 3
    [alert] = alerts(sealed)
    assert "its head is block 0" in alert.details["problem"]
    assert mismatch_gauge() == 1


def test_a_log_behind_the_head_catches_up_and_an_edited_one_stops_the_sealer(
        sealed: World, now: datetime) -> None:
    log = log_of(sealed)
    log.write_text(log.read_text().splitlines()[0] + "\n")  # the appends of blocks 2, 3 lost
    add_events(sealed, 1, now - timedelta(minutes=2))
    call_command("audit_seal")
    assert [c["block"] for c in checkpoints(sealed)] == [1, 3, 4]
    assert not alerts(sealed)
    forged = {**checkpoints(sealed)[-1], "block": 5}
    log.write_text(log.read_text() + json.dumps(forged) + "\n")
    add_events(sealed, 1, now - timedelta(minutes=1))
    call_command("audit_seal")
    assert AuditBlock.objects.filter(tenant_id=sealed.owner.tenant.id).count() == 4
    [alert] = alerts(sealed)
    assert "checkpoint log" in alert.details["problem"], alert.details


def test_each_pass_publishes_a_checkpoint_signed_by_the_deployment(
        sealed: World, tmp_path: Path) -> None:
    found = checkpoints(sealed)
    blocks = [block_record(b) for b in
              AuditBlock.objects.filter(tenant_id=sealed.owner.tenant.id).order_by("number")]
    assert [c["block"] for c in found] == [1, 2, 3]
    public = Ed25519PrivateKey.from_private_bytes(SEED).public_key()
    for checkpoint, block in zip(found, blocks, strict=True):
        assert set(checkpoint) == CHECKPOINT_KEYS
        assert checkpoint["tenant"] == sealed.owner.tenant.id
        assert checkpoint["digest"] == block_digest(block)
        assert checkpoint["sealed_at"] == block["sealed_at"]
        assert checkpoint["kid"] == "k2"
        # The signed bytes (docs/audit-seal.md#checkpoints): canon/1 without `signature`.
        public.verify(b64url_decode(checkpoint["signature"]), canonicalize(
            {k: v for k, v in checkpoint.items() if k != "signature"}))
    assert AuditHead.objects.get(tenant_id=sealed.owner.tenant.id).block == 3
    call_command("audit_verify", "--tenant", sealed.owner.tenant.name,
                 "--checkpoint", str(log_of(sealed)))
    one = tmp_path / "one.json"
    one.write_text(json.dumps(found[-1]))
    call_command("audit_verify", "--checkpoint", str(one))
    one.write_text(json.dumps({**found[1], "digest": "sha256:" + "00" * 32}))
    verify_fails("--checkpoint", str(one), words="signature")


def test_an_export_verifies_offline_without_secret_key_or_database(
        sealed: World, tmp_path: Path) -> None:
    out, keys = tmp_path / "audit.jsonl", tmp_path / "keys.json"
    call_command("audit_export", "--tenant", sealed.owner.tenant.name, "--out", str(out))
    keys.write_text(Client().get("/api/v1/keys/").content.decode())
    # Production settings, no SECRET_KEY, and a database that is not there.
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT),
           "DJANGO_SETTINGS_MODULE": "config.settings", "APP_VAR_DIR": str(tmp_path / "var"),
           "DATABASE_URL": "postgres://nobody@127.0.0.1:1/nothing"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(ROOT / "manage.py"), "audit_verify",
                               "--file", str(out), "--keys", str(keys), *args], env=env,
                              cwd=tmp_path, capture_output=True, text=True, check=False,
                              timeout=120)

    ok = run()
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "verifies" in ok.stdout
    with_log = run("--checkpoint", str(log_of(sealed)))
    assert with_log.returncode == 0, with_log.stdout + with_log.stderr
    text = out.read_text()
    out.write_text(text.replace('"n":1', '"n":7', 1))
    bad = run()
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "root does not match" in bad.stderr
