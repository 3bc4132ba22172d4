from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from dispatch.services.principals import human_create
from protocols.roles import Role


class Command(BaseCommand):
    help = ("Create a human login with a role and print a personal bearer token alone.\n"
            "Roles: operator (decides approvals), admin (operator rights plus unknown "
            "outcomes, grants and audit), none (can log in, sees nothing).\n"
            "Unless DJANGO_DEBUG is on, the password must pass AUTH_PASSWORD_VALIDATORS "
            "(12 characters or more, not common, not all digits, not like the name).\n"
            "Example: manage.py create_human olive --tenant acme --role operator "
            "--password 'correct horse battery staple'")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="login name, also the principal name")
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--role", required=True, choices=[*Role, "none"])
        parser.add_argument("--password", required=True)
        parser.add_argument("--email", default="",
                            help="where approval requests are emailed (optional)")

    def handle(self, *args: Any, **opts: Any) -> None:
        if not settings.DEBUG:  # the demo and the tests log in with short passwords
            try:
                validate_password(opts["password"], user=get_user_model()(username=opts["name"]))
            except ValidationError as exc:
                raise CommandError("--password: " + " ".join(exc.messages)) from None
        _, token = human_create(name=opts["name"], tenant=opts["tenant"], role=opts["role"],
                                password=opts["password"], email=opts["email"])
        self.stdout.write(token)
