"""`manage.py audit_verify [--tenant T]` (docs/audit-seal.md#verification): recompute every
sealed block of the database; exits 0 when all verify, 1 naming the first event or block that
was changed, removed or inserted. `audit_verify --file F --keys K` verifies an `audit_export`
file with only `K`, the JSON of `GET /api/v1/keys/`: no database, no settings read."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dispatch.models import Tenant
from dispatch.services.seal_verify import verify_all
from protocols.auditseal import verify_export


class Command(BaseCommand):
    help = ("Verify the sealed audit chain: exits 1 naming the first event or block changed, "
            "removed or inserted.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="only this tenant (its name or id)")
        parser.add_argument("--file", help="verify this audit_export file instead (offline)")
        parser.add_argument("--keys", help="with --file: the JWKS file of GET /api/v1/keys/")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["file"]:
            self._verify_file(opts["file"], opts["keys"])
            return
        tenant_id = None
        if opts["tenant"]:
            tenant = Tenant.objects.filter(name=opts["tenant"]).first() or \
                Tenant.objects.filter(id=opts["tenant"]).first()
            if tenant is None:
                raise CommandError(f"no tenant {opts['tenant']!r}")
            tenant_id = tenant.pk
        failures = [(t, problem) for t, problem in verify_all(tenant_id).items() if problem]
        if failures:
            failed, problem = failures[0]
            raise CommandError(f"tenant {failed}: {problem}", returncode=1)
        self.stdout.write("audit chain verifies")

    def _verify_file(self, path: str, keys: str | None) -> None:
        if not keys:
            raise CommandError("--file needs --keys (the JSON of GET /api/v1/keys/)")
        try:
            with open(keys, encoding="utf-8") as jwks_file:
                jwks = json.load(jwks_file)
            with open(path, encoding="utf-8", newline="") as export:
                problem = verify_export(export.read(), jwks)
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read: {exc}") from None
        if problem:
            raise CommandError(f"{path}: {problem}", returncode=1)
        self.stdout.write(f"{path} verifies")
