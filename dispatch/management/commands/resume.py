from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from dispatch.management.pause_scope import add_scope_arguments, scope_from
from dispatch.management.refusals import command_error
from dispatch.services.pauses import pause_lift, pause_scope
from protocols.denials import Denial


class Command(BaseCommand):
    help = ("Resume what 'manage.py pause' paused, named by the same options: the operations "
            "it held back go on. Example: manage.py resume --tenant acme --operation "
            "tickets.reply")

    def add_arguments(self, parser: CommandParser) -> None:
        add_scope_arguments(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        scope = scope_from(opts)
        try:
            pause = pause_lift(actor="manage.py", tenant=scope.tenant,
                               operation=scope.operation, agent=scope.agent,
                               now=timezone.now())
        except Denial as exc:
            raise command_error(exc) from None
        self.stdout.write(f"resumed {pause_scope(pause)} (paused since "
                          f"{pause.paused_at.isoformat()} by {pause.paused_by})")
