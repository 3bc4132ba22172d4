"""Words for an unknown outcome and its settlement (docs/design.md#reconciliation): what a
destination's last lookup said, what an admin's resolution recorded, what became of a renewal,
and every field of the action, for the pages an admin resolves from and an operator decides a
renewal on. Pure: nothing here reads the database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from console.presenters import compact_json, flatten
from protocols.lifecycle import OperationState

#: The states an operation ends in: its page stops following it there.
SETTLED = frozenset({OperationState.COMPLETED, OperationState.FAILED_NO_EFFECT,
                     OperationState.UNKNOWN, OperationState.RECONCILED_COMPLETED,
                     OperationState.RECONCILED_NO_EFFECT})

#: A lookup's verdict (`dispatch.handlers.LookupResult.found`) in words.
VERDICTS = {
    "present": ("present", "the destination holds the effect: it happened"),
    "absent": ("absent", "the destination does not hold the effect"),
    "unknown": ("could not tell", "the destination's answer proves nothing either way"),
}

#: What each resolution records, in words (the banner after it, the renewal's page).
RESOLUTIONS = {
    "completed": "Recorded as completed: the effect happened.",
    "no_effect": "Recorded as no effect: the effect did not happen.",
}
_RESOLVED_STATES = {"reconciled_completed": "completed", "reconciled_no_effect": "no_effect"}


@dataclass(frozen=True)
class Verdict:
    word: str  # present | absent | could not tell
    meaning: str


def lookup_verdict(found: str) -> Verdict | None:
    """The last lookup's verdict in words, or None before any lookup."""
    if found not in VERDICTS:
        return None
    word, meaning = VERDICTS[found]
    return Verdict(word, meaning)


def resolution_banner(state: str, operation_id: str, withdrawn_attempt: int | None) -> str:
    """The banner after an admin resolved an operation (now in `state`)."""
    words = RESOLUTIONS.get(_RESOLVED_STATES.get(state, ""), f"Recorded: {state}.")
    banner = f"{words} Operation {operation_id} is settled and is never attempted again."
    if withdrawn_attempt is not None:
        banner += (f" Its pending renewal of attempt {withdrawn_attempt} was withdrawn: no "
                   "operator can approve it now.")
    return banner


def action_fields(snapshot: Any) -> list[tuple[str, str]]:
    """Every leaf of the action's arguments, by its full dotted path, untruncated: the values
    a repeat would send (a referenced resource's payload included)."""
    arguments = snapshot.get("arguments", {}) if isinstance(snapshot, dict) else {}
    return [(path, compact_json(value)) for path, value in flatten(arguments)]
