from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from demo.seed import ADMIN, AGENT, OPERATOR, SECOND_OPERATOR, seed
from protocols.lifecycle import OperationState


class Command(BaseCommand):
    help = ("Create the demo tenant 'acme' once: an agent with grants for the three demo "
            "contracts, an operator and an admin login, proposals waiting for approval (a "
            "large payment and a stale proposal among them) and an unknown outcome for the "
            "admin (dispatched to the SMTP sink: run the destinations first). Safe to run "
            "again: nothing is added, and the agent keeps the token the token file holds. "
            "Prints the logins and the agent token.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000/console/")
        parser.add_argument("--no-proposals", action="store_true")
        parser.add_argument(
            "--token-file", type=Path, default=None,
            help="where the agent's token is kept between runs (default: "
                 "VAR_DIR/demo/agent-token, readable by its owner only)")
        parser.add_argument(
            "--agents", action="store_true",
            help="open the scripted agents' executions once (found again on a later run) and "
                 "print their ids, for run_agent --execution and research_example.py "
                 "--execution")

    def handle(self, *args: Any, **opts: Any) -> None:
        token_file = opts["token_file"] or Path(settings.VAR_DIR) / "demo" / "agent-token"
        seeded = seed(token_file=token_file, proposals=not opts["no_proposals"],
                      agents=opts["agents"],
                      sources_url=str(settings.DESTINATIONS["sources_url"]),
                      now=timezone.now())
        if seeded.unknown is not None and seeded.unknown.state != OperationState.UNKNOWN:
            self.stderr.write(f"The email meant to stay unknown ended {seeded.unknown.state}: "
                              "is the SMTP sink running (python manage.py run_destinations)?")
        self.stdout.write(
            f"Console: {opts['url']}\n"
            f"Operator login: {OPERATOR[0]} / {OPERATOR[1]}\n"
            f"Second operator login (four eyes): {SECOND_OPERATOR[0]} / {SECOND_OPERATOR[1]}\n"
            f"Admin login:    {ADMIN[0]} / {ADMIN[1]}\n"
            f"Agent '{AGENT}' bearer token: {seeded.token}\n"
            f"{'Demo data created' if seeded.created else 'Demo data found, left as it was'}"
            f"; the token is kept in {token_file}\n"
        )
        if seeded.executions is not None:
            support, research = seeded.executions
            self.stdout.write(f"Support agent execution: {support}\n"
                              f"Research agent execution: {research}\n")
