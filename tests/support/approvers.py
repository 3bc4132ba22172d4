"""An operator in a thread of their own, for the tests that run an agent against a live server:
they wait for the agent's pending approval and decide it as the console's approval page would,
while the agent's tool waits for the decision.

    operator, decided = operator_decides(world, "grant")
    answer = while_operator_decides(operator, lambda: run_agent(...))
    assert len(decided) == 1
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import connection
from django.utils import timezone

from dispatch.models import ApprovalRequest
from tests.conftest import World

T = TypeVar("T")

#: How long an agent's tool waits for the decision and the outcome, and the operator for the
#: proposal.
WAIT = 30.0


def operator_decides(world: World, decision: str) -> tuple[threading.Thread, list[Any]]:
    """A thread that waits for the owner's pending approval, then decides it ("grant" or
    "deny") as the world's approver; `decided` receives the decision's answer."""
    from dispatch.services.approvals import approval_decide

    decided: list[Any] = []

    def decide() -> None:
        try:
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline:
                approval = (ApprovalRequest.objects.select_related("proposal")
                            .filter(proposal__principal=world.owner, state="pending").first())
                if approval is not None:
                    decided.append(approval_decide(
                        approver=world.approver, approval_id=approval.id, decision=decision,
                        digest=approval.proposal.digest, now=timezone.now()))
                    return
                time.sleep(0.1)
        finally:
            connection.close()

    return threading.Thread(target=decide, daemon=True), decided


def while_operator_decides(operator: threading.Thread, run: Callable[[], T]) -> T:
    """`run()`, with the operator's thread started first and joined after."""
    operator.start()
    try:
        return run()
    finally:
        operator.join(WAIT)
