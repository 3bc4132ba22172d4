from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from dispatch.models import Grant
from dispatch.services.authority import grant_revoke_tree


class Command(BaseCommand):
    help = ("Revoke a grant and every grant delegated from it; prints 'revoked ID'. "
            "Example: manage.py revoke grt_...")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("grant_id")

    def handle(self, *args: Any, **opts: Any) -> None:
        grant = Grant.objects.filter(id=opts["grant_id"]).first()
        if grant is None:
            raise CommandError(f"no grant {opts['grant_id']!r}")
        revoked = grant_revoke_tree(grant=grant, actor_name="manage.py", now=timezone.now())
        self.stdout.write(f"revoked {revoked.id}")
