"""The chaos soak's audit (bench/chaos.py), run after the drain as a child with the private
stack's environment: `python -m bench.chaos_audit < INPUT_JSON` prints the figures and every
violation as JSON.

From outside: the destinations' own records (the SMTP sink's messages, the bank's transfers,
the publisher's publications, read from their files as `demo.destinations.list_all` does). From
the store: operations, permits, attempts, grants. The promise checked: every approved action
ends with exactly one effect, or `unknown` with at most one; an operation `completed` or
reconciled as completed has exactly one effect, one that ended without effect has none; no
email is delivered twice; no effect exists without its operation; no operation is left
`claimed` or `pending`; no permit is `claimed` without an operation; no proposal the API
accepted is missing; no granted approval's permit is left `issued` (a lost intent); no permit
is claimed, and no retry starts, after the revocation of the grant it rests on.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

#: The operation each destination records, and how its records name the operation.
EXTERNAL = {"email.send": "email", "payments.transfer": "bank", "report.publish": "publications"}
DONE = {"completed", "reconciled_completed"}
NONE = {"failed_no_effect", "reconciled_no_effect"}


def _key(kind: str, row: dict[str, Any]) -> str:
    if kind == "email":
        return str(row["message_id"]).strip("<>").split("@", 1)[0]
    return str(row["key"])


def audit(given: dict[str, Any]) -> dict[str, Any]:
    from demo.destinations import list_all
    from dispatch.models import ApprovalRequest, Attempt, Grant, Operation, Permit, Proposal

    violations: list[str] = []
    records = list_all(given["destinations_dir"])
    effects: dict[str, Counter[str]] = {}
    for kind in ("email", "bank", "publications"):
        effects[kind] = Counter(_key(kind, row) for row in records[kind])
    for message, n in effects["email"].items():
        if n > 1:
            violations.append(f"email delivered {n} times: operation {message}")

    operations = {op.id: op for op in Operation.objects.all()}
    states = Counter(op.state for op in operations.values())
    for kind, found in effects.items():
        for key in found:
            if key not in operations:
                violations.append(f"{kind} effect {key} without an operation")
    settled: Counter[str] = Counter()
    for op in operations.values():
        if op.state in ("claimed", "pending"):
            violations.append(f"operation {op.id} ({op.operation}) left {op.state}")
        kind = EXTERNAL.get(op.operation)
        if kind is None:
            continue
        n = effects[kind][op.id]
        if (op.state in DONE and n != 1) or (op.state in NONE and n != 0):
            violations.append(f"operation {op.id} ({op.operation}) {op.state} with {n} effects")
        elif op.state == "unknown" and n > 1:
            violations.append(f"operation {op.id} ({op.operation}) unknown with {n} effects")
        if op.uncertain or op.state.startswith("reconciled") or op.state == "unknown":
            settled[op.state] += 1

    for permit in Permit.objects.filter(state="claimed"):
        if permit.operation_id not in operations:
            violations.append(f"permit {permit.id} claimed without an operation")
    known = set(Proposal.objects.filter(id__in=given["proposals"]).values_list("id", flat=True))
    for missing in sorted(set(given["proposals"]) - known):
        violations.append(f"proposal {missing} accepted by the API but not in the store")
    for approval in ApprovalRequest.objects.filter(state="granted").select_related("permit"):
        permit = getattr(approval, "permit", None)
        if permit is not None and permit.state == "issued" and permit.proposal.dispatch_on_approval:
            violations.append(f"approval {approval.id} granted, permit {permit.id} never "
                              "claimed (lost intent)")

    revoked = {g.id: g.revoked_at for g in Grant.objects.filter(revoked_at__isnull=False)}
    late = 0
    for permit in Permit.objects.filter(grant_id__in=list(revoked), claimed_at__isnull=False):
        if permit.claimed_at and permit.claimed_at > revoked[permit.grant_id]:
            late += 1
            violations.append(f"permit {permit.id} claimed after grant {permit.grant_id} "
                              "was revoked")
    for attempt in Attempt.objects.filter(number__gt=1, operation__permit__grant_id__in=list(
            revoked)).select_related("operation__permit"):
        permit = attempt.operation.permit
        if permit is not None and attempt.started_at > revoked[permit.grant_id]:
            violations.append(f"attempt {attempt.number} of {attempt.operation_id} started "
                              f"after grant {permit.grant_id} was revoked")

    approved = ApprovalRequest.objects.filter(state="granted").count()
    return {
        "operations": dict(states), "approved": approved,
        "effects": {kind: sum(found.values()) for kind, found in effects.items()},
        "uncertain_outcomes": dict(settled),
        "operations_by_contract": dict(Counter(op.operation for op in operations.values())),
        "revoked_grants": len(revoked),
        "violations": violations,
    }


def main() -> int:
    import django

    django.setup()
    print(json.dumps(audit(json.load(sys.stdin))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
