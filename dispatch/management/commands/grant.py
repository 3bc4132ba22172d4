from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from dispatch.management.refusals import command_error
from dispatch.models import Principal
from dispatch.services.authority import grant_issue
from protocols.denials import Denial
from protocols.expiry import expiry_after
from protocols.jsontypes import JSONObject


def parse_scopes(items: list[str]) -> JSONObject:
    scope: JSONObject = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key or not values:
            raise CommandError(f"--scope takes KEY=VALUE[,VALUE...] or KEY=*, not {item!r}")
        scope[key] = "*" if values == "*" else [v for v in values.split(",") if v]
    return scope


class Command(BaseCommand):
    help = ("Issue a grant to a principal for an operation and print the grant id.\n"
            "Example: manage.py grant support-bot tickets.reply "
            "--scope queue=billing --expires-in 86400")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("subject", help="principal name")
        parser.add_argument("operation", help="qualified operation name, e.g. tickets.reply")
        parser.add_argument("--scope", action="append", default=[],
                            help="KEY=VALUE[,VALUE...] or KEY=* (repeatable)")
        parser.add_argument("--expires-in", type=int, default=None, help="seconds")

    def handle(self, *args: Any, **opts: Any) -> None:
        # A delegated step's sub-agent is nobody's to grant to (docs/design.md#delegation).
        subject = Principal.objects.filter(name=opts["subject"], subagent=False).first()
        if subject is None:
            raise CommandError(f"no principal named {opts['subject']!r}")
        now = timezone.now()
        expires_in = opts["expires_in"]
        if expires_in is not None:
            try:
                expiry_after(now, expires_in)
            except ValueError as exc:
                what = ("--expires-in" if expires_in < 1
                        else f"--expires-in {expires_in}: that expiry")
                raise CommandError(f"{what} {exc}") from None
        try:
            grant = grant_issue(issuer="manage.py", subject=subject,
                                operations=[opts["operation"]],
                                scope=parse_scopes(opts["scope"]), now=now,
                                expires_in=expires_in)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        except Denial as exc:
            raise command_error(exc) from None
        self.stdout.write(grant.id)
