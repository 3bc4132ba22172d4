"""Named points for fault-injection and race tests at the claim, external-call and completion
boundaries (docs/design.md#how-it-is-tested).

- `DISPATCH_CRASH_AT=<name>`: the process kills itself with SIGKILL at that point: no cleanup,
  no rollback handlers, exactly like a crash.
- `DISPATCH_PAUSE_AT=<name>[,<name>…]` with `DISPATCH_PAUSE_DIR=<dir>`: at that point the
  process writes `<dir>/<name>.reached` and waits until `<dir>/<name>.go` exists, so that a test
  in another process can force an interleaving (a stale attempt answering after a newer one
  started, a revocation committing between a check and a claim). It waits at most
  `DISPATCH_PAUSE_TIMEOUT` seconds (default 60), then goes on.
- `DISPATCH_TAMPER_AT=<name>` with `DISPATCH_TAMPER_ARGUMENTS=<JSON object>`: at a payload point
  (`failpoint_payload`) the process replaces those members of the snapshot's arguments, as a
  compromised or buggy worker would alter the approved payload after the claim.

Unset, a failpoint costs one dictionary lookup.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

POINTS = frozenset({
    "claim.before_commit",      # inside the claim transaction, every row written, not committed
    "claim.pause_checked",      # inside the claim transaction, no pause found, nothing written
    "claim.after_commit",       # the claim committed, the handler not yet started
    "dispatch.before_claim",    # every check of a dispatch made, the claim not yet begun
    "decision.before_transaction",  # a decision checked, its transaction not begun
    "decision.vote_recorded",   # a vote written under the approval's lock, not yet counted
    "delegation.before_transaction",  # a delegation checked its parent, nothing written
    "attempt.before_call",      # the attempt recorded, no I/O yet
    "attempt.payload",          # the snapshot handed to the handler (DISPATCH_TAMPER_AT only)
    "attempt.after_effect",     # the destination acted, the outcome not yet recorded
    "attempt.before_outcome",   # the handler returned (any outcome), nothing recorded yet
    "attempt.before_retry",     # an uncertain attempt ended, the backoff before the next begun
    "agent.after_proposal",     # the agent's proposal committed, its tool result not recorded
    "renewal.before_transaction",  # a renewal's grant checked, its transaction not begun
    "pause.before_transaction",  # a pause's scope checked, its transaction not begun
    "cancel.locked",            # a cancellation after the claim holds the operation, no move yet
    "workflow.resume_claimed",  # a wake-up claimed a parked step, the run not yet resumed
    "workflow.before_park",     # a step found its approval pending, the run not yet parked
    "workflow.lane_step",       # a lane of a concurrent step is about to run its next step
    "workflow.lane_ended",      # a lane's end is journaled, its join not yet delivered
    "notify.before_enqueue",    # a notification's row committed, its task not yet enqueued
    "notify.before_send",       # a notification claimed (committed), nothing sent yet
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


def failpoint_payload(name: str, snapshot: dict[str, Any]) -> dict[str, Any]:
    """`snapshot`, or a copy whose arguments `DISPATCH_TAMPER_ARGUMENTS` altered at `name`."""
    if os.environ.get("DISPATCH_TAMPER_AT") != name:
        return snapshot
    changes = json.loads(os.environ["DISPATCH_TAMPER_ARGUMENTS"])
    return {**snapshot, "arguments": {**snapshot["arguments"], **changes}}
