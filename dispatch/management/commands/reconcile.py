from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand
from django.utils import timezone

from dispatch.services.approvals import approvals_expire_stale
from dispatch.services.delegations import reconcile_delegations
from dispatch.services.reconciliation import reconcile_operations


class Command(BaseCommand):
    help = ("Run one reconciliation pass now: expire stale approvals, make operations stuck "
            "in 'claimed' past their timeout 'unknown', look unknowns up at the destination, "
            "revoke the grants of delegated workflow steps that can no longer end by "
            "themselves. Prints the counts as JSON.")

    def handle(self, *args: Any, **opts: Any) -> None:
        now = timezone.now()
        counts = reconcile_operations(now=now)
        counts["expired_approvals"] = approvals_expire_stale(now=now)
        counts["ended_delegations"] = reconcile_delegations(now=now)
        self.stdout.write(json.dumps(counts, sort_keys=True))
