"""Refusals that must not happen: one proposal's lapse does not undo another's standing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from dispatch.models import (
    AuditEvent,
)
from dispatch.services.approvals import approvals_expire_stale
from protocols.denials import Denial, DenialCode
from tests.conftest import World
from tests.db.denials.support import (
    decide,
    dispatch,
    propose_lookup,
    state_of,
)
from tests.support.claims import refused

pytestmark = pytest.mark.django_db


def test_lapse_of_a_second_proposal_leaves_the_first_permit_usable(world: World) -> None:
    """A revision may carry several proposals (lifecycle table); a pending one expiring unused
    must not take back the authorization a human granted the other."""
    draft = world.draft()
    granted = world.propose_email(draft)
    permit = world.grant(granted)
    world.propose_email(draft, approval_expires_in=60)
    later = world.now + timedelta(seconds=120)
    assert approvals_expire_stale(now=later) == 1
    assert permit.expires_at > later
    operation = dispatch(world, granted, now=later)
    assert operation.permit_id == permit.id
    assert state_of(draft) == "dispatching"


def test_lapse_of_a_second_proposal_leaves_the_first_approvable(world: World) -> None:
    draft = world.draft()
    pending = world.propose_email(draft)
    world.propose_email(draft, approval_expires_in=60)
    later = world.now + timedelta(seconds=120)
    assert approvals_expire_stale(now=later) == 1
    _, permit = decide(world, pending, now=later)
    assert permit is not None
    assert state_of(draft) == "authorized"


def test_a_dispatch_denial_is_audited_without_the_argument_it_quotes(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/design.md#audit: the caller hears which value fell outside the scope; the audit keeps
    the code and the key, never the value. (A scope violation cannot be reached at dispatch
    through the services since a revoked covering grant answers authority_revoked: the
    admission is made to raise it.)"""
    proposal = propose_lookup(world)

    def outside(*args: Any, **kwargs: Any) -> Any:
        raise Denial(DenialCode.SCOPE_VIOLATION, key="customer", value="cus-secret-42")

    monkeypatch.setattr("dispatch.services.dispatcher.admit_proposal", outside)
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.details == {"key": "customer", "value": "cus-secret-42"}
    event = AuditEvent.objects.filter(kind="dispatch.denied").latest("id")
    assert event.details == {"code": "scope_violation", "key": "customer"}
