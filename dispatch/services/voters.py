"""Whose votes count toward a quorum (docs/design.md#approval-policies): a vote counts while its
voter is active and holds the role. The vote that completes a quorum, of an approval or of a
renewal, counts every earlier one again with this filter, in its own transaction; a vote is cast
only by a voter who counts now (`require_counting_voter`), so a quorum of one is never completed
by a voter deactivated since they signed in."""

from __future__ import annotations

from django.db.models import Q

from dispatch.models import Principal
from protocols.denials import Denial, DenialCode
from protocols.roles import roles_allowing


def counting_voters(role: str, *, prefix: str = "approver__") -> Q:
    """The voters whose grants count where `role` decides, as a filter on a vote's
    `approver` (`prefix=""`: on a principal): humans still active who hold `role` now (an admin
    holds every role). A voter deactivated or demoted since voting no longer counts."""
    return Q(**{f"{prefix}kind": Principal.Kind.HUMAN, f"{prefix}user__is_active": True,
                f"{prefix}role__in": roles_allowing(role)})


def require_counting_voter(voter: Principal, role: str) -> None:
    """`role_required` unless `voter`'s vote would count where `role` decides, as the store says
    now (not as the caller's copy of the principal says): active, human, holding the role."""
    if not Principal.objects.filter(counting_voters(role, prefix=""), id=voter.id).exists():
        raise Denial(DenialCode.ROLE_REQUIRED, role=role,
                     reason="the voter is not active, or no longer holds the role")
