"""Named crash points for fault-injection tests at the claim, external-call and completion
boundaries (spec §13). With `DISPATCH_CRASH_AT=<name>` in its environment, a process kills
itself with SIGKILL at that point: no cleanup, no rollback handlers, exactly like a crash."""

from __future__ import annotations

import os
import signal

POINTS = frozenset({
    "claim.before_commit",   # inside the claim transaction, every row written, not committed
    "claim.after_commit",    # the claim committed, the handler not yet started
    "attempt.before_call",   # the attempt recorded, no I/O yet
    "attempt.after_effect",  # the destination acted, the outcome not yet recorded
    "agent.after_proposal",  # the agent's proposal committed, its tool result not recorded
})


def failpoint(name: str) -> None:
    if os.environ.get("DISPATCH_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
