"""One outcome vocabulary: what each operation state has come to (docs/design.md#outcomes)."""

from __future__ import annotations

import pytest

from protocols.lifecycle import OPERATION_LIFECYCLE, OperationState, Outcome, settled_outcome


@pytest.mark.parametrize(("state", "outcome"), [
    ("pending", None),
    ("claimed", None),
    ("completed", Outcome.COMPLETED),
    ("reconciled_completed", Outcome.COMPLETED),
    ("failed_no_effect", Outcome.FAILED_NO_EFFECT),
    ("reconciled_no_effect", Outcome.FAILED_NO_EFFECT),
    ("unknown", Outcome.UNKNOWN),
])
def test_each_state_has_its_outcome(state: str, outcome: Outcome | None) -> None:
    assert settled_outcome(state) is outcome
    assert settled_outcome(OperationState(state)) is outcome


def test_every_state_of_the_lifecycle_is_named() -> None:
    assert set(OperationState) == OPERATION_LIFECYCLE.states


def test_the_outcomes_are_the_lifecycles_words() -> None:
    assert {o.value for o in Outcome} <= {s.value for s in OperationState}


def test_an_unknown_state_is_refused() -> None:
    with pytest.raises(ValueError, match="sent"):
        settled_outcome("sent")
