"""`manage.py audit_check [--tenant T] [--json]`: the trace safety property
(docs/design.md#dispatcher).

Thin: `dispatch.services.audit.audit_replay` replays the audit through the transition tables;
this prints a summary and every violation (or the report as JSON with --json) and exits 1 when
there is any violation, 0 when there is none.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dispatch.services.audit import audit_replay
from protocols.denials import Denial
from protocols.trace_events import TraceReport


class Command(BaseCommand):
    help = ("Replay the audit through the transition tables: every attempt needs a "
            "permit.claimed before it (with a permit where approval was asked), every move of "
            "an operation, permit, approval or resource must be in its table. "
            "Prints a summary and every violation; exits 1 on any violation.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="only this tenant's audit (its name)")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            report = audit_replay(tenant=opts["tenant"])
        except Denial as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(_json(report) if opts["json"] else _text(report))
        if report.violations:
            count = len(report.violations)
            raise CommandError(f"{count} violation{'s' if count != 1 else ''} of the trace "
                               "safety property", returncode=1)


def _text(report: TraceReport) -> str:
    states = ", ".join(f"{state} {n}" for state, n in sorted(report.states.items()))
    count = len(report.violations)
    lines = [f"audit_check: {report.events} events, {report.operations} operations"
             f"{f' ({states})' if states else ''}, {report.permits} permits, "
             f"{report.approvals} approvals, {report.resources} resources: "
             f"{count or 'no'} violation{'s' if count != 1 else ''}"]
    lines += [f"event {v.event_id} {v.operation_id or '-'} {v.kind}: {v.code.value}: "
              f"{v.message}" for v in report.violations]
    return "\n".join(lines)


def _json(report: TraceReport) -> str:
    return json.dumps({
        "events": report.events, "operations": report.operations, "permits": report.permits,
        "approvals": report.approvals, "resources": report.resources,
        "states": dict(sorted(report.states.items())),
        "violations": [{"event_id": v.event_id, "operation_id": v.operation_id,
                        "kind": v.kind, "code": v.code.value, "message": v.message}
                       for v in report.violations],
    })
