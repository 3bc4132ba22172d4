"""`audit_export` and `audit_verify --file F --keys K` (docs/audit-seal.md#export): an export
verifies with only the JWKS, in a process with no Django and no database; any one-byte edit of
it fails."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from dispatch.models import AuditBlock
from protocols.auditseal import verify_export
from tests.conftest import World


def export(world: World, tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "audit.jsonl"
    call_command("audit_export", "--tenant", world.owner.tenant.name, "--out", str(out))
    keys = tmp_path / "keys.json"
    keys.write_text(Client().get("/api/v1/keys/").content.decode())
    return out, keys


def test_an_export_verifies_with_only_the_public_keys(sealed: World, tmp_path: Path) -> None:
    out, keys = export(sealed, tmp_path)
    lines = out.read_text().splitlines()
    assert json.loads(lines[0])["type"] == "export"
    assert [json.loads(line)["type"] for line in lines[1:]] == ["event"] * 15 + ["block"] * 3
    call_command("audit_verify", "--file", str(out), "--keys", str(keys))
    # A bare interpreter: no Django settings, no database, only the file and the JWKS.
    code = ("import json, sys; from protocols.auditseal import verify_export; "
            "p = verify_export(open(sys.argv[1], encoding='utf-8', newline='').read(), "
            "json.load(open(sys.argv[2]))); print(p); sys.exit(1 if p else 0)")
    run = subprocess.run([sys.executable, "-c", code, str(out), str(keys)], env={
        "PYTHONPATH": str(Path(__file__).resolve().parents[2])}, capture_output=True, text=True,
        check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_one_byte_edit_of_an_export_fails(sealed: World, tmp_path: Path) -> None:
    out, keys = export(sealed, tmp_path)
    jwks = json.loads(keys.read_text())
    data = out.read_bytes()
    assert verify_export(data.decode(), jwks) is None
    for position in range(len(data)):
        other = ord("x") if data[position] != ord("x") else ord("y")
        for replacement in {data[position] ^ 0x01, other}:
            edited = data[:position] + bytes([replacement]) + data[position + 1:]
            try:
                text = edited.decode("utf-8")
            except UnicodeDecodeError:
                continue  # not even UTF-8: refused when read
            assert verify_export(text, jwks) is not None, (position, replacement)
    out.write_bytes(data[:100] + bytes([data[100] ^ 0x01]) + data[101:])
    with pytest.raises(CommandError) as raised:
        call_command("audit_verify", "--file", str(out), "--keys", str(keys))
    assert raised.value.returncode == 1


def test_since_exports_the_later_blocks_and_they_verify(sealed: World, tmp_path: Path) -> None:
    second = AuditBlock.objects.get(tenant_id=sealed.owner.tenant.id, number=2)
    out = tmp_path / "later.jsonl"
    call_command("audit_export", "--tenant", sealed.owner.tenant.name, "--since",
                 second.sealed_at.replace("Z", "+00:00"), "--out", str(out))
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["block"] for r in records if r["type"] == "block"] == [2, 3]
    assert sum(r["type"] == "event" for r in records) == 10
    jwks = Client().get("/api/v1/keys/").json()
    assert verify_export(out.read_text(), jwks) is None
