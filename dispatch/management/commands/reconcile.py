from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections
from django.utils import timezone

from dispatch.heartbeat import heartbeat_touch
from dispatch.services.approvals import approvals_expire_stale
from dispatch.services.delegations import reconcile_delegations
from dispatch.services.reconciliation import reconcile_operations
from dispatch.stopping import stop_signals


class Command(BaseCommand):
    help = ("Run one reconciliation pass now: expire stale approvals, make operations stuck "
            "in 'claimed' past their timeout 'unknown', look unknowns up at the destination, "
            "revoke the grants of delegated workflow steps that can no longer end by "
            "themselves. Prints the counts as JSON. With --every SECONDS it runs a pass every "
            "SECONDS until stopped, one JSON line each: a reconciler without beat "
            "(docs/deployment.md). Passes are leased, so several such processes never run one "
            "twice at once. SIGTERM or SIGINT stops it after the pass it is in (at once "
            "between passes, status 0); a second one abandons that pass.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--every", type=float, default=0.0,
                            help="run a pass every SECONDS until stopped (default: one pass)")

    def handle(self, *args: Any, **opts: Any) -> None:
        every = float(opts["every"])
        with stop_signals() as stop:
            while True:
                self._one_pass()
                if every <= 0 or stop.is_set():
                    return
                close_old_connections()  # as between requests: a dead connection is replaced
                if stop.wait(every):
                    return

    def _one_pass(self) -> None:
        now = timezone.now()
        counts = reconcile_operations(now=now)
        counts["expired_approvals"] = approvals_expire_stale(now=now)
        counts["ended_delegations"] = reconcile_delegations(now=now)
        self.stdout.write(json.dumps(counts, sort_keys=True))
        self.stdout.flush()
        heartbeat_touch()  # its liveness probe (deploy/probe.py)
