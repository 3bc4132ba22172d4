from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from demo.destinations.runner import serve
from dispatch.signing import jwks

#: Where the command saves the deployment's JWKS for the bank and the publisher to verify with.
KEYS_FILE = "console-keys.json"


class Command(BaseCommand):
    help = ("Run the SMTP sink (and its HTTP lookup) and the fake bank in the foreground on the "
            "ports the settings name (SMTP_SINK_PORT, SMTP_SINK_LOOKUP_URL, BANK_URL), with the "
            "publisher and the source server on the bank's port, listening on DESTINATIONS_BIND "
            "(127.0.0.1) and keeping records in DESTINATIONS_DIR. The bank and the publisher "
            "verify permit tokens (docs/permit-tokens.md) against the deployment's public keys, "
            "saved as DESTINATIONS_DIR/console-keys.json at start.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--keys", default=None,
                            help="verify with this JWKS file instead of the deployment's keys")
        parser.add_argument("--no-permits", action="store_true",
                            help="do not verify permit tokens (the legacy demo mode)")

    def handle(self, *args: Any, **opts: Any) -> None:
        cfg = settings.DESTINATIONS
        keys_file: Path | None = None
        if not opts["no_permits"]:
            keys_file = Path(opts["keys"]) if opts["keys"] else Path(cfg["dir"]) / KEYS_FILE
            if not opts["keys"]:
                keys_file.parent.mkdir(parents=True, exist_ok=True)
                keys_file.write_text(json.dumps(jwks()), encoding="utf-8")
        serve(cfg["dir"], smtp_port=int(cfg["smtp_port"]),
              bank_port=urlparse(cfg["bank_url"]).port or 80,
              lookup_port=urlparse(cfg["smtp_lookup_url"]).port or 80,
              host=str(cfg["bind"]), keys_file=keys_file)
