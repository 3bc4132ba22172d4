"""Resolving an unknown outcome withdraws its pending renewal (docs/design.md#renewals): an
operation an admin has settled is never attempted again, so no operator is left with a live
"Approve attempt N" for it. The withdrawal is a move of the renewal's own table
(`renewal_move`, `revoke`), audited as `renewal.withdrawn`, in the resolution's transaction."""

from __future__ import annotations

import pytest

from dispatch.models import AuditEvent, Operation, Renewal
from dispatch.services.reconciliation import operation_resolve
from dispatch.services.renewals import operation_reauthorize, renewal_decide
from protocols.denials import Denial, DenialCode
from tests.conftest import World
from tests.db.test_renewals import LATER, stopped_transfer

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("outcome", "state"), [("completed", "reconciled_completed"),
                                                ("no_effect", "reconciled_no_effect")])
def test_resolving_withdraws_the_pending_renewal(live: World, outcome: str, state: str) -> None:
    operation = stopped_transfer(live)
    renewal = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                    now=live.now + LATER, reason="the bank was down")
    resolved = operation_resolve(admin=live.admin, operation_id=operation.id, outcome=outcome,
                                 evidence="checked the bank's statement", now=live.now + LATER)
    assert resolved.state == state
    withdrawn = Renewal.objects.get(id=renewal.id)
    assert (withdrawn.state, withdrawn.decided_at) == ("revoked", live.now + LATER)
    assert withdrawn.approver_id is None  # nobody decided it
    events = {e.kind: e for e in AuditEvent.objects.filter(operation_id=operation.id)}
    event = events["renewal.withdrawn"]
    assert (event.actor, event.details["renewal_id"], event.details["attempt"]) == (
        live.admin.name, renewal.id, renewal.attempt)
    assert event.details["resolved"] == outcome
    assert event.at == events["operation.reconciled"].at  # written with the resolution
    # The operator who would have decided it finds it decided, and nothing moves.
    with pytest.raises(Denial) as caught:
        renewal_decide(approver=live.approver, renewal_id=renewal.id, decision="grant",
                       digest=renewal.digest, now=live.now + LATER)
    assert caught.value.code is DenialCode.APPROVAL_DECIDED
    assert Operation.objects.get(id=operation.id).state == state


def test_a_refused_resolution_withdraws_nothing(live: World) -> None:
    """The withdrawal rides in the resolution's transaction: a resolution the operation's
    state refuses (a renewal granted first moved it back to `claimed`) leaves every renewal
    as it was."""
    operation = stopped_transfer(live)
    first = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                  now=live.now + LATER)
    renewal_decide(approver=live.approver, renewal_id=first.id, decision="grant",
                   digest=first.digest, now=live.now + LATER)
    with pytest.raises(Denial) as caught:
        operation_resolve(admin=live.admin, operation_id=operation.id, outcome="completed",
                          evidence="late", now=live.now + LATER)
    assert caught.value.code is DenialCode.PROTOCOL_STATE_INVALID
    assert Renewal.objects.get(id=first.id).state == "granted"
    assert not AuditEvent.objects.filter(kind="renewal.withdrawn").exists()


def test_resolving_without_a_renewal_withdraws_nothing(live: World) -> None:
    operation = stopped_transfer(live)
    operation_resolve(admin=live.admin, operation_id=operation.id, outcome="completed",
                      evidence="checked", now=live.now + LATER)
    assert not AuditEvent.objects.filter(kind="renewal.withdrawn").exists()
