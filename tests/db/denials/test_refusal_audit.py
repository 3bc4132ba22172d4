"""What the audit records of a refusal."""

from __future__ import annotations

import json

import pytest

from dispatch.models import (
    AuditEvent,
)
from tests.conftest import World
from tests.db.denials.support import (
    dispatch,
)
from tests.support.claims import refused

pytestmark = pytest.mark.django_db


def test_dispatch_denial_is_audited_with_its_code(world: World) -> None:
    """docs/design.md#proposals lists `dispatch.denied` (with its code) among the audit kinds."""
    proposal = world.propose_email(world.draft())
    refused(dispatch, world=world, proposal=proposal)
    events = list(AuditEvent.objects.filter(kind="dispatch.denied", proposal_id=proposal.id))
    assert len(events) == 1
    assert "approval_pending" in json.dumps(events[0].details)
