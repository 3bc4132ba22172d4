"""Whose votes count toward a quorum (docs/design.md#approval-policies): a vote counts while its
voter is active and holds the role. The vote that completes a quorum, of an approval or of a
renewal, counts every earlier one again with this filter, in its own transaction."""

from __future__ import annotations

from django.db.models import Q

from dispatch.models import Principal
from protocols.roles import roles_allowing


def counting_voters(role: str) -> Q:
    """The voters whose grants count where `role` decides, as a filter on a vote's
    `approver`: humans still active who hold `role` now (an admin holds every role). A voter
    deactivated or demoted since voting no longer counts."""
    return Q(approver__kind=Principal.Kind.HUMAN, approver__user__is_active=True,
             approver__role__in=roles_allowing(role))
