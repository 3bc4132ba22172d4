"""Four eyes in the console (docs/design.md#approval-policies): an approval that needs more than
one approver shows how many of its approvals are in ("1 of 2 approvals"), who gave each and
when; a viewer who already approved it cannot vote again, and reads why.

Pure wording over the votes `dispatch.selectors.votes` reads; the views call `tally_view` and
`queue_tallies` and hand the result to the templates.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from dispatch.selectors import votes
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import ApprovalState

if TYPE_CHECKING:
    from dispatch.models import ApprovalRequest, Principal
    from dispatch.selectors.votes import Cast

#: The quorum is at most 10 (protocols/approval_rules.py).
ORDINALS = {2: "second", 3: "third", 4: "fourth", 5: "fifth", 6: "sixth", 7: "seventh",
            8: "eighth", 9: "ninth", 10: "tenth"}


def progress(granted: int, quorum: int) -> str:
    """`1 of 2 approvals`."""
    return f"{granted} of {quorum} approval{'s' if quorum != 1 else ''}"


def still_needed(granted: int, quorum: int) -> str:
    """Who must still approve: `a second operator must approve`, or `2 more operators must
    approve` when more than one is missing."""
    remaining = quorum - granted
    if remaining <= 0:
        return "no further approval is needed"
    if remaining == 1:
        return f"a {ORDINALS.get(quorum, f'{quorum}th')} operator must approve"
    return f"{remaining} more operators must approve"


@dataclass(frozen=True)
class VoteLine:
    """One grant as the page lists it."""

    name: str
    at: datetime
    mine: bool


@dataclass(frozen=True)
class Tally:
    """The votes of an approval that needs more than one approver, as its page shows them."""

    quorum: int
    votes: tuple[VoteLine, ...]
    pending: bool = True
    #: Who else could still approve (not the viewer, not those already in), by name.
    others: tuple[str, ...] = ()

    @property
    def granted(self) -> int:
        return len(self.votes)

    @property
    def progress(self) -> str:
        return progress(self.granted, self.quorum)

    @property
    def needed(self) -> str:
        return still_needed(self.granted, self.quorum)

    @property
    def last(self) -> bool:
        """The next grant completes the quorum: it mints the permit and may run the action."""
        return self.quorum - self.granted <= 1

    @property
    def mine(self) -> VoteLine | None:
        """The viewer's own vote, if they gave one: they cannot vote again."""
        return next((vote for vote in self.votes if vote.mine), None)


def tally(quorum: int, casts: Sequence[Cast], viewer_id: str, *, pending: bool = True) -> Tally:
    return Tally(quorum=quorum, pending=pending, votes=tuple(
        VoteLine(name=cast.approver_name, at=cast.at, mine=cast.approver_id == viewer_id)
        for cast in casts))


def tally_view(principal: Principal, approval: ApprovalRequest) -> Tally | None:
    """The approval's tally, for an approval needing more than one approver (one query); None
    for one that a single approver decides."""
    if approval.quorum <= 1:
        return None
    pending = approval.state == ApprovalState.PENDING
    counted = tally(approval.quorum, votes.vote_list(approval=approval), principal.id,
                    pending=pending)
    if not pending:
        return counted
    others = tuple(name for name in votes.voters_left(approval=approval)
                   if name != principal.name)
    return replace(counted, others=others)


@dataclass(frozen=True)
class QueueTally:
    """A queue row's `1 of 2`, and whether the viewer is one of those in."""

    progress: str
    mine: bool


def queue_tallies(principal: Principal,
                  approvals: Iterable[ApprovalRequest]) -> dict[str, QueueTally]:
    """For the page's approvals needing more than one approver, by id: at most one query for
    the whole page, none when no row needs more than one approver."""
    rows = list(approvals)
    voters = votes.grant_voters(approvals=rows)
    return {approval.id: QueueTally(
        progress=f"{len(voters[approval.id])} of {approval.quorum}",
        mine=principal.id in voters[approval.id])
        for approval in rows if approval.id in voters}


def vote_recorded(tallied: Tally) -> str:
    """The banner after a grant that did not complete the quorum: not "Approved"."""
    return (f"Your approval is recorded: {tallied.progress}. No permit yet and nothing runs: "
            f"{tallied.needed}.")


def refusal_headline(tallied: Tally | None, denial: Denial | None) -> str | None:
    """A second click (or another tab) of a viewer whose vote is already in: theirs, not
    someone else's decision."""
    if (denial is not None and denial.code is DenialCode.APPROVAL_DECIDED
            and tallied is not None and tallied.pending and tallied.mine is not None):
        return f"You already approved this; {tallied.needed}."
    return None


@dataclass(frozen=True)
class Waiting:
    """One of the viewer's approvals still short of its quorum, as the Decided tab lists it."""

    approval_id: str
    operation: str
    at: datetime
    progress: str
    needed: str


def votes_waiting(principal: Principal) -> list[Waiting]:
    """The viewer's approvals not yet decided: theirs is in, others' are still needed (two
    queries, one when there are none)."""
    cast = votes.votes_waiting(viewer=principal)
    voters = votes.grant_voters(approvals=[vote.approval for vote in cast])
    return [Waiting(approval_id=vote.approval_id, operation=vote.approval.proposal.operation,
                    at=vote.voted_at,
                    progress=progress(len(voters.get(vote.approval_id, [])),
                                      vote.approval.quorum),
                    needed=still_needed(len(voters.get(vote.approval_id, [])),
                                        vote.approval.quorum))
            for vote in cast]
