"""`manage.py audit_export --tenant T [--since ISO] --out F` (docs/audit-seal.md#export)."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dispatch.models import Tenant
from dispatch.services.seals import export_lines


class Command(BaseCommand):
    help = ("Export a tenant's sealed audit (events, then blocks) as JSON Lines, verifiable "
            "offline with `audit_verify --file F --keys K`.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="the tenant (its name or id)")
        parser.add_argument("--since", help="only blocks sealed at or after this ISO time")
        parser.add_argument("--out", help="the file to write (default: standard output)")

    def handle(self, *args: Any, **opts: Any) -> None:
        tenant = Tenant.objects.filter(name=opts["tenant"]).first() or \
            Tenant.objects.filter(id=opts["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {opts['tenant']!r}")
        since = None
        if opts["since"]:
            try:
                since = datetime.fromisoformat(opts["since"])
            except ValueError:
                raise CommandError(f"--since: not an ISO time: {opts['since']!r}") from None
            if since.tzinfo is None:
                raise CommandError("--since needs a time zone (e.g. 2026-01-01T00:00:00Z)")
        lines = export_lines(tenant.pk, since=since)
        if opts["out"]:
            with open(opts["out"], "w", encoding="utf-8") as out:
                for line in lines:
                    out.write(line + "\n")
        else:
            for line in lines:
                sys.stdout.write(line + "\n")
