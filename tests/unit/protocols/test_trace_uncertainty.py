"""Sticky uncertainty in the audit's replay (docs/design.md#outcomes): a `failed_no_effect` that
follows an uncertain attempt with no authoritative absence recorded since is
`uncertainty_dropped`."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count
from typing import Any

from protocols.trace import check_trace
from protocols.trace_events import TraceCode, TraceEvent

_ids: Iterator[int] = count(1)


def ev(kind: str, **details: Any) -> TraceEvent:
    return TraceEvent(id=next(_ids), kind=kind, operation_id="op_1", proposal_id="prp_1",
                      details=details)


def claim() -> TraceEvent:
    return ev("permit.claimed", permit_id=None)


def codes(*events: TraceEvent) -> list[TraceCode]:
    return [v.code for v in check_trace(events).violations]


def test_a_definite_failure_after_an_uncertain_attempt_is_flagged() -> None:
    assert codes(claim(), ev("attempt.started", attempt=1),
                 ev("attempt.uncertain", attempt=1),
                 ev("attempt.started", attempt=2, retry_of=1, authorized_by="retry"),
                 ev("operation.failed_no_effect", attempt=2, outcome="failed_no_effect")
                 ) == [TraceCode.UNCERTAINTY_DROPPED]


def test_the_same_failure_ending_unknown_is_clean() -> None:
    assert codes(claim(), ev("attempt.started", attempt=1),
                 ev("attempt.uncertain", attempt=1),
                 ev("attempt.started", attempt=2, retry_of=1, authorized_by="retry"),
                 ev("operation.unknown", attempt=2, outcome="unknown", sticky="…")) == []


def test_a_retry_after_an_unknown_keeps_the_uncertainty() -> None:
    assert codes(claim(), ev("attempt.started", attempt=1),
                 ev("operation.unknown", attempt=1, outcome="unknown"),
                 ev("operation.retried", attempt=1, outcome="claimed"),
                 ev("attempt.started", attempt=2, retry_of=1, authorized_by="renewal"),
                 ev("operation.failed_no_effect", attempt=2, outcome="failed_no_effect")
                 ) == [TraceCode.UNCERTAINTY_DROPPED]


def test_a_recorded_absence_clears_it() -> None:
    assert codes(claim(), ev("attempt.started", attempt=1),
                 ev("operation.unknown", attempt=1, outcome="unknown"),
                 ev("operation.retried", attempt=1, outcome="claimed", absence_proven=True),
                 ev("attempt.started", attempt=2, retry_of=1, authorized_by="retry"),
                 ev("operation.failed_no_effect", attempt=2, outcome="failed_no_effect")
                 ) == []


def test_a_retry_written_before_attempt_uncertain_existed_counts_as_uncertain() -> None:
    # The old same-key retry ended its predecessor uncertain inside `attempt.started`.
    assert codes(claim(), ev("attempt.started", attempt=1),
                 ev("attempt.started", attempt=2, retry_of=1),
                 ev("operation.failed_no_effect", attempt=2, outcome="failed_no_effect")
                 ) == [TraceCode.UNCERTAINTY_DROPPED]


def test_an_attempt_uncertain_out_of_order_is_flagged() -> None:
    assert codes(claim(), ev("attempt.started", attempt=1),
                 ev("attempt.uncertain", attempt=2)) == [TraceCode.ATTEMPT_OUT_OF_ORDER]
    assert codes(claim(), ev("attempt.started", attempt=1),
                 ev("operation.completed", attempt=1, outcome="completed"),
                 ev("attempt.uncertain", attempt=1)) == [TraceCode.ATTEMPT_STATE_INVALID]


def test_a_definite_failure_of_a_first_attempt_is_clean() -> None:
    assert codes(claim(), ev("attempt.started", attempt=1),
                 ev("operation.failed_no_effect", attempt=1, outcome="failed_no_effect")) == []
