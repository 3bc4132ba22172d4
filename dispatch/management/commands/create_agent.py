from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from dispatch.management.refusals import command_error
from dispatch.services.principals import agent_create
from protocols.denials import Denial


class Command(BaseCommand):
    help = ("Create an agent principal with a tool set and print its bearer token alone "
            "(shown once; only its hash is stored). Creates the tenant if needed.\n"
            "Example: manage.py create_agent support-bot --tenant acme "
            "--tools tickets.reply,tickets.read")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="unique principal name")
        parser.add_argument("--tenant", required=True, help="tenant name")
        parser.add_argument("--tools", default="",
                            help="comma-separated operations the agent may ever propose")

    def handle(self, *args: Any, **opts: Any) -> None:
        tools = [t.strip() for t in opts["tools"].split(",") if t.strip()]
        try:
            _, token = agent_create(name=opts["name"], tenant=opts["tenant"], tools=tools,
                                    actor="manage.py")
        except Denial as exc:
            raise command_error(exc) from None
        self.stdout.write(token)
