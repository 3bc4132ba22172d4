from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from dispatch.management.pause_scope import add_scope_arguments, scope_from
from dispatch.management.refusals import command_error
from dispatch.services.pauses import pause_scope, pause_set
from protocols.denials import Denial


class Command(BaseCommand):
    help = ("Pause a tenant, one of its contracts or one of its agents: from now on every claim "
            "and every attempt start there is refused (paused); pending approvals stay. "
            "Prints 'paused <scope> since <time>'. "
            "Example: manage.py pause --tenant acme --operation tickets.reply")

    def add_arguments(self, parser: CommandParser) -> None:
        add_scope_arguments(parser)
        parser.add_argument("--reason", default="", help="shown on the console's banner")

    def handle(self, *args: Any, **opts: Any) -> None:
        scope = scope_from(opts)
        try:
            pause, created = pause_set(actor="manage.py", tenant=scope.tenant,
                                 operation=scope.operation, agent=scope.agent,
                                 reason=opts["reason"], now=timezone.now())
        except Denial as exc:
            raise command_error(exc) from None
        said = "paused" if created else "already paused"
        self.stdout.write(f"{said} {pause_scope(pause)} since {pause.paused_at.isoformat()} "
                          f"by {pause.paused_by}")
