from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from demo.destinations.runner import list_all


class Command(BaseCommand):
    help = ("Print what each demo destination has recorded: every email the SMTP sink "
            "accepted, every transfer the bank made, every source the source server serves "
            "(with the digest of its bytes) and every report the publisher published, read "
            "from their own files.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="machine-readable output")

    def handle(self, *args: Any, **opts: Any) -> None:
        found = list_all(settings.DESTINATIONS["dir"])
        if opts["json"]:
            self.stdout.write(json.dumps(found, sort_keys=True))
            return
        self.stdout.write(f"email ({len(found['email'])}):")
        for m in found["email"]:
            self.stdout.write(f"  {m['message_id']}  {m['from']} -> {', '.join(m['to'])}: "
                              f"{m['subject']}")
        self.stdout.write(f"bank ({len(found['bank'])}):")
        for t in found["bank"]:
            self.stdout.write(f"  {t['key']}  {t['from_account']} -> {t['to_account']}: "
                              f"{t['amount']} {t['currency']}")
        self.stdout.write(f"sources ({len(found['sources'])}):")
        for s in found["sources"]:
            self.stdout.write(f"  {s['url']}  {s['digest']}")
        self.stdout.write(f"publications ({len(found['publications'])}):")
        for p in found["publications"]:
            self.stdout.write(f"  {p['key']}  {p['report_id']} r{p['revision']} {p['digest']}: "
                              f"{p['title']}")
