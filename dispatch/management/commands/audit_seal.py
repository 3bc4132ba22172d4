"""`manage.py audit_seal`: one pass of the sealer now (docs/audit-seal.md#sealing); the beat task
`dispatch.tasks.audit_seal` runs the same pass every few seconds."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from dispatch.services.sealer import seal_all


class Command(BaseCommand):
    help = "Seal every tenant's ripe, unsealed audit events into signed blocks now."

    def handle(self, *args: Any, **opts: Any) -> None:
        self.stdout.write(f"sealed {seal_all()} events")
