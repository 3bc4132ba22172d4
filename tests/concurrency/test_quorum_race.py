"""Two operators vote at once on a four-eyes approval (docs/design.md#approval-policies), across
OS processes on the real database: exactly one permit, minted once, by the vote that completes
the quorum; both votes recorded; a third vote is `approval_decided`.

The interleaving is forced: the first voter stands between writing its vote and counting the
votes, inside its transaction, while the second begins its own. Without the approval's row lock
each would count only its own vote on PostgreSQL and neither would grant; with it, the second
waits, counts both and grants.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from dispatch.models import AuditEvent, Decision, Permit, Vote
from dispatch.services.approvals import approval_decide
from protocols.denials import Denial, DenialCode
from tests.conftest import World, make_world
from tests.support.paused import PausedChild
from tests.support.quorum import FOUR_EYES_ENV, four_eyes, second_operator

__all__ = ["four_eyes"]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow,
              pytest.mark.usefixtures("four_eyes")]


@pytest.fixture
def world(now: datetime) -> World:
    return make_world(now)


def test_two_votes_at_once_complete_the_quorum_exactly_once(world: World,
                                                            tmp_path: Path) -> None:
    proposal = world.propose_transfer("25000.00")
    assert proposal.approval.quorum == 2
    other = second_operator()
    args = (proposal.approval.id, proposal.digest)
    with PausedChild(tmp_path, "decide", world.approver.id, *args,
                     pause="decision.vote_recorded", **FOUR_EYES_ENV) as first, \
            PausedChild(tmp_path, "decide", other.id, *args,
                        pause="decision.before_transaction", **FOUR_EYES_ENV) as second:
        first.reached()   # its vote written, uncommitted, the approval held
        second.reached()  # every check passed, its transaction not begun
        second.release()
        time.sleep(1.0)
        assert second.proc.poll() is None, "the second vote did not wait for the first"
        assert first.result() == {"state": "pending"}  # one of two
        assert second.result() == {"state": "granted"}  # it counted both
    assert Permit.objects.count() == 1
    permit = Permit.objects.get()
    assert permit.approver_id == other.id
    assert sorted(Vote.objects.values_list("approver_id", flat=True)) == sorted(
        [world.approver.id, other.id])
    assert Decision.objects.count() == 1
    assert AuditEvent.objects.filter(kind="approval.granted").count() == 1

    third = second_operator("approver3")
    with pytest.raises(Denial) as late:
        approval_decide(approver=third, approval_id=proposal.approval.id, decision="grant",
                        digest=proposal.digest, now=world.now)
    assert late.value.code is DenialCode.APPROVAL_DECIDED


def test_a_denial_racing_the_completing_grant_leaves_one_decision(world: World,
                                                                  tmp_path: Path) -> None:
    """One grant is in; the second grant and a denial race: whichever commits first decides,
    the other is `approval_decided`, and a permit exists only if the grant won."""
    proposal = world.propose_transfer("25000.00")
    approval_decide(approver=world.approver, approval_id=proposal.approval.id,
                    decision="grant", digest=proposal.digest, now=world.now)
    granter, denier = second_operator(), second_operator("approver3")
    with PausedChild(tmp_path, "decide", granter.id, proposal.approval.id, proposal.digest,
                     pause="decision.vote_recorded", **FOUR_EYES_ENV) as grant:
        grant.reached()
        with pytest.raises(Denial) as late:
            # Waits for the grant's transaction (the approval's lock), then finds it decided.
            import threading
            threading.Timer(1.0, grant.release).start()
            approval_decide(approver=denier, approval_id=proposal.approval.id,
                            decision="deny", digest=proposal.digest, now=world.now)
        assert late.value.code is DenialCode.APPROVAL_DECIDED
        assert grant.result() == {"state": "granted"}
    assert Permit.objects.count() == 1 and Decision.objects.count() == 1
    assert not Vote.objects.filter(approver=denier).exists()
