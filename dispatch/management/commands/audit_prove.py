"""`manage.py audit_prove EVENT_ID` (docs/audit-seal.md#merkle): print, as JSON, one sealed
event, its digest, its signed block and the Merkle audit path from the event to the block's root.
Exits 1 for an event that is not sealed yet, or whose proof does not reach the root."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dispatch.services.seals import event_proof
from protocols.auditseal import verify_proof


class Command(BaseCommand):
    help = "Print an inclusion proof of one sealed audit event in its signed block (JSON)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("event_id", type=int)

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            proof = event_proof(opts["event_id"])
        except (KeyError, LookupError) as exc:
            raise CommandError(f"event {opts['event_id']}: cannot prove ({exc})",
                               returncode=1) from None
        if proof is None:
            raise CommandError(f"event {opts['event_id']}: not sealed yet", returncode=1)
        self.stdout.write(json.dumps(proof, ensure_ascii=False, indent=2))
        if not verify_proof(proof["event_digest"], proof["proof"], proof["block"]["root"]):
            raise CommandError("the proof does not reach the block's root: the block's events "
                               "changed (run audit_verify)", returncode=1)
