"""A child process that holds a nested scope, for the ceilings tests (docs/design.md#budgets):

    python -m tests.support.scopes hold PARENT_SCOPE_ID CALLS SPEND
        opens a scope of CALLS calls (and 2 attempts, 1 concurrency) under the parent with a
        short lease, spends SPEND calls and one attempt, enters its one concurrency slot, prints
        `{"scope_id": ...}` and then hangs until it is killed;
    python -m tests.support.scopes open PARENT_SCOPE_ID CALLS
        opens a scope of CALLS calls under the parent once and prints `{"scope_id": ...}` or
        `{"denied": "<code>", "details": {...}}`.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta

import django


def main(action: str, parent_id: str, calls: str, spend: str = "0") -> None:
    django.setup()
    from django.utils import timezone

    from dispatch.models import Scope
    from dispatch.services.ceilings import Ceiling, scope_enter, scope_open, scope_take
    from protocols.denials import Denial

    parent = Scope.objects.select_related("execution").get(id=parent_id)
    if action == "open":
        try:
            scope = scope_open(execution=parent.execution, name=f"pid-{time.monotonic_ns()}",
                               parent_id=parent.id, ceiling=Ceiling(int(calls), 0, 0),
                               now=timezone.now())
        except Denial as denial:
            print(json.dumps({"denied": denial.code.value, "details": denial.details}),
                  flush=True)
            return
        print(json.dumps({"scope_id": scope.id}), flush=True)
        return
    scope = scope_open(execution=parent.execution, name="held", parent_id=parent.id,
                       ceiling=Ceiling(int(calls), 2, 1), now=timezone.now(),
                       holder="child", lease=timedelta(seconds=1))
    scope_take(scope.id, calls=int(spend), attempts=1)
    scope_enter(scope.id)
    print(json.dumps({"scope_id": scope.id}), flush=True)
    time.sleep(600)  # killed by the test


if __name__ == "__main__":
    main(*sys.argv[1:])
