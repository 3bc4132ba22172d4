"""`manage.py check_compat OLD NEW`: classify a contract change (docs/design.md#extensions).

Reads two contract declarations (the JSON of `OperationContract.declaration()`), prints each
difference and the verdict, and exits 1 when the change is breaking (2 for unreadable input).
Pending approvals made under OLD can never dispatch under NEW unless the fingerprints are equal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from protocols.workflow import classify_change, contract_from_declaration
from protocols.workflow.compat import render_text


class Command(BaseCommand):
    help = ("Compare two contract declarations (JSON files) and say whether NEW is a "
            "compatible replacement of OLD; exit 1 when it is breaking.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("old", help="the old contract declaration (JSON)")
        parser.add_argument("new", help="the new contract declaration (JSON)")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args: Any, **opts: Any) -> None:
        contracts = []
        for name in (opts["old"], opts["new"]):
            try:
                data = json.loads(Path(name).read_text(encoding="utf-8"))
                contracts.append(contract_from_declaration(data))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
                raise CommandError(f"{name}: {exc}", returncode=2) from None
        result = classify_change(contracts[0], contracts[1])
        if opts["json"]:
            self.stdout.write(json.dumps(result.as_json(), indent=2))
        else:
            self.stdout.write(render_text(result))
        if result.breaking:
            raise CommandError("the change is breaking", returncode=1)
