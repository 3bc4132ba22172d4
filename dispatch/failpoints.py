"""Named points for fault-injection and race tests at the claim, external-call and completion
boundaries (docs/design.md#how-it-is-tested).

The code passes each point by name; what happens there is decided by the module the setting
`FAILPOINTS` names. The production settings name none, so a failpoint does nothing and a payload
point hands the snapshot on unchanged, whatever the environment says: nothing shipped can crash,
pause or alter a payload on request. Only the test settings name one (`tests.support.failpoints`:
a crash, a pause, or a payload altered as a compromised worker would alter it, each chosen by
the environment of the process under test).

Off, a failpoint costs one settings attribute read.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType
from typing import Any

from django.conf import settings

POINTS = frozenset({
    "claim.before_commit",      # inside the claim transaction, every row written, not committed
    "claim.pause_checked",      # inside the claim transaction, no pause found, nothing written
    "claim.after_commit",       # the claim committed, the handler not yet started
    "dispatch.before_claim",    # every check of a dispatch made, the claim not yet begun
    "decision.before_transaction",  # a decision checked, its transaction not begun
    "decision.vote_recorded",   # a vote written under the approval's lock, not yet counted
    "delegation.before_transaction",  # a delegation checked its parent, nothing written
    "attempt.before_call",      # the attempt recorded, no I/O yet
    "attempt.payload",          # the snapshot handed to the handler (failpoint_payload only)
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
    "rate.after_update",        # a call's rate UPDATE found no row it may count in, no read yet
    "reconcile.pass_leased",    # a reconciliation pass holds its lease, nothing looked at yet
})


def _injector() -> ModuleType | None:
    module: str = settings.FAILPOINTS
    return import_module(module) if module else None


def failpoint(name: str) -> None:
    injector = _injector()
    if injector is not None:
        injector.reached(name)


def failpoint_payload(name: str, snapshot: dict[str, Any]) -> dict[str, Any]:
    """`snapshot`, or (under the test settings) a copy the injector altered at `name`."""
    injector = _injector()
    if injector is None:
        return snapshot
    altered: dict[str, Any] = injector.payload(name, snapshot)
    return altered
