"""Named points for fault-injection and race tests at the claim, external-call and completion
boundaries (docs/design.md#how-it-is-tested).

- `DISPATCH_CRASH_AT=<name>`: the process kills itself with SIGKILL at that point: no cleanup,
  no rollback handlers, exactly like a crash.
- `DISPATCH_PAUSE_AT=<name>[,<name>…]` with `DISPATCH_PAUSE_DIR=<dir>`: at that point the
  process writes `<dir>/<name>.reached` and waits until `<dir>/<name>.go` exists, so that a test
  in another process can force an interleaving (a stale attempt answering after a newer one
  started, a revocation committing between a check and a claim). It waits at most
  `DISPATCH_PAUSE_TIMEOUT` seconds (default 60), then goes on.

Unset, a failpoint costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

POINTS = frozenset({
    "claim.before_commit",      # inside the claim transaction, every row written, not committed
    "claim.after_commit",       # the claim committed, the handler not yet started
    "dispatch.before_claim",    # every check of a dispatch made, the claim not yet begun
    "decision.before_transaction",  # a decision checked, its transaction not begun
    "delegation.before_transaction",  # a delegation checked its parent, nothing written
    "attempt.before_call",      # the attempt recorded, no I/O yet
    "attempt.after_effect",     # the destination acted, the outcome not yet recorded
    "attempt.before_outcome",   # the handler returned (any outcome), nothing recorded yet
    "attempt.before_retry",     # an uncertain attempt ended, the backoff before the next begun
    "agent.after_proposal",     # the agent's proposal committed, its tool result not recorded
    "renewal.before_transaction",  # a renewal's grant checked, its transaction not begun
    "cancel.locked",            # a cancellation after the claim holds the operation, no move yet
})


def failpoint(name: str) -> None:
    if os.environ.get("DISPATCH_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
    paused = os.environ.get("DISPATCH_PAUSE_AT")
    if paused and name in paused.split(","):
        _pause(name)


def _pause(name: str) -> None:
    folder = Path(os.environ["DISPATCH_PAUSE_DIR"])
    (folder / f"{name}.reached").write_text(str(os.getpid()))
    deadline = time.monotonic() + float(os.environ.get("DISPATCH_PAUSE_TIMEOUT", "60"))
    go = folder / f"{name}.go"
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
