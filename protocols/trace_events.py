"""What the trace replay (`protocols.trace`) reads and answers: the audit events it is given, each
violation it finds, with its stable code, and the report of a replay. Pure, as the replay."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class TraceCode(StrEnum):
    """Why an event breaks the property; stable, for whoever reads the report."""

    ATTEMPT_UNCLAIMED = "attempt_unclaimed"          # an attempt with no claim before it
    EVENT_UNCLAIMED = "event_unclaimed"              # any other operation event before its claim
    TRANSITION_INVALID = "transition_invalid"        # not in the record's table
    OUTCOME_MISMATCH = "outcome_mismatch"            # the recorded state is not the table's
    ATTEMPT_STATE_INVALID = "attempt_state_invalid"  # an attempt of an operation not claimed
    ATTEMPT_OUT_OF_ORDER = "attempt_out_of_order"    # not the next attempt, or not the latest
    KIND_UNDECLARED = "kind_undeclared"              # an operation's event of no known kind
    OPERATION_MISSING = "operation_missing"          # an operation's kind naming no operation
    PERMIT_UNISSUED = "permit_unissued"              # a claim of a permit no grant minted
    PERMIT_MISMATCH = "permit_mismatch"              # a permit claimed for another proposal
    PROPOSAL_CLAIMED_TWICE = "proposal_claimed_twice"  # one proposal, two operations
    CLAIM_AFTER_CANCEL = "claim_after_cancel"        # a claim of a proposal cancelled unclaimed
    EVIDENCE_UNSETTLED = "evidence_unsettled"        # a receipt or attestation, not completed
    EVIDENCE_TWICE = "evidence_twice"                # a second record of one operation
    UNCERTAINTY_DROPPED = "uncertainty_dropped"      # failed_no_effect after an uncertain
    #                                                  attempt, with no proven absence since
    PERMIT_MISSING = "permit_missing"                # a claim without one, approval required
    RESOURCE_STALE = "resource_stale"                # a move of a revision not the current one


@dataclass(frozen=True)
class TraceEvent:
    """One audit event, as the replay needs it."""

    id: int
    kind: str
    operation_id: str
    proposal_id: str
    details: Mapping[str, Any]


@dataclass(frozen=True)
class Violation:
    event_id: int
    operation_id: str
    kind: str
    code: TraceCode
    message: str


@dataclass
class TraceReport:
    events: int = 0
    operations: int = 0
    permits: int = 0
    resources: int = 0
    approvals: int = 0  # approval requests and renewals
    states: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
