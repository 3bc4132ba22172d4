"""`manage.py audit_verify [--tenant T] [--checkpoint C]` (docs/audit-seal.md#verification):
recompute every sealed block of the database; exits 0 when all verify, 1 naming the first event
or block that was changed, removed or inserted. With `--checkpoint C` (one checkpoint's JSON, or
a checkpoint log), first holds the chain to those checkpoints: 1 naming the block the chain lacks
or holds with another digest. `audit_verify --file F --keys K [--checkpoint C]` verifies an
`audit_export` file with only `K`, the JSON of `GET /api/v1/keys/`: no database, no settings
read (`manage.py` runs it before Django is set up: `dispatch.audit_offline`)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dispatch.audit_offline import verify_files
from dispatch.models import Tenant
from dispatch.services.seals import verify_all, verify_checkpoints
from protocols.auditseal import parse_checkpoints


class Command(BaseCommand):
    help = ("Verify the sealed audit chain: exits 1 naming the first event or block changed, "
            "removed or inserted, or that a checkpoint names and the chain lacks.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="only this tenant (its name or id)")
        parser.add_argument("--file", help="verify this audit_export file instead (offline)")
        parser.add_argument("--keys", help="with --file: the JWKS file of GET /api/v1/keys/")
        parser.add_argument("--checkpoint", help="one checkpoint's JSON, or a checkpoint log "
                                                 "(JSON Lines), that the chain must hold")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["file"]:
            ok, message = verify_files(opts["file"], opts["keys"], opts["checkpoint"])
            if not ok:
                raise CommandError(message, returncode=1)
            self.stdout.write(message)
            return
        tenant_id = None
        if opts["tenant"]:
            tenant = Tenant.objects.filter(name=opts["tenant"]).first() or \
                Tenant.objects.filter(id=opts["tenant"]).first()
            if tenant is None:
                raise CommandError(f"no tenant {opts['tenant']!r}")
            tenant_id = tenant.pk
        if opts["checkpoint"]:
            self._hold_to(opts["checkpoint"], tenant_id)
        failures = [(t, problem) for t, problem in verify_all(tenant_id).items() if problem]
        if failures:
            failed, problem = failures[0]
            raise CommandError(f"tenant {failed}: {problem}", returncode=1)
        self.stdout.write("audit chain verifies")

    def _hold_to(self, path: str, tenant_id: str | None) -> None:
        try:
            with open(path, encoding="utf-8") as found:
                checkpoints = parse_checkpoints(found.read())
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        if tenant_id is not None:
            checkpoints = [c for c in checkpoints if c.get("tenant") == tenant_id]
            if not checkpoints:
                raise CommandError(f"{path} holds no checkpoint of this tenant", returncode=1)
        problem = verify_checkpoints(checkpoints)
        if problem:
            raise CommandError(f"{path}: {problem}", returncode=1)
