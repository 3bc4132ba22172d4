from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from dispatch.services.principals import human_create


class Command(BaseCommand):
    help = ("Create a human login with a role and print a personal bearer token alone.\n"
            "Roles: operator (decides approvals), admin (operator rights plus unknown "
            "outcomes, grants and audit), none (can log in, sees nothing).\n"
            "Example: manage.py create_human olive --tenant acme --role operator --password pw")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="login name, also the principal name")
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--role", required=True, choices=["operator", "admin", "none"])
        parser.add_argument("--password", required=True)

    def handle(self, *args: Any, **opts: Any) -> None:
        _, token = human_create(name=opts["name"], tenant=opts["tenant"], role=opts["role"],
                                password=opts["password"])
        self.stdout.write(token)
