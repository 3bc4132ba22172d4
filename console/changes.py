"""The "changed" and "stale" flags of a queue row and an approval page (docs/design.md#changes).

A proposal is **stale** when a resource it is bound to was edited since: it can never run
(the approval resolver and the dispatcher refuse it, `stale_revision`), so the console offers
only Deny, says why, and lists what the newer revision changes. A proposal **revises** an
earlier one when it acts on a later revision of a resource an earlier proposal acted on: its
badge lists what changed since that proposal's snapshot (`field_changes`), an added recipient
in red.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from console.field_changes import FieldChange, comparable, field_changes
from dispatch.selectors.changes import Lineage, Moved, proposal_lineage

if TYPE_CHECKING:
    from dispatch.models import Principal, Proposal


# A queue row lists this many changes other than added recipients (which it always lists).
ROW_CHANGES = 4


@dataclass(frozen=True)
class ChangeView:
    """What a row or a page shows. `moved`: the resources edited since (stale when any);
    `changes`: what the newer revision changes (stale) or what changed since the earlier
    proposal (revised); `since`: the words that say against what."""

    moved: tuple[Moved, ...]
    changes: tuple[FieldChange, ...]
    since: str
    earlier_approval_id: str | None

    @property
    def stale(self) -> bool:
        return bool(self.moved)

    @property
    def recipients_added(self) -> tuple[FieldChange, ...]:
        return tuple(c for c in self.changes if c.recipient)

    @property
    def listed(self) -> tuple[FieldChange, ...]:
        """What a queue row lists: every recipient added, and the first `ROW_CHANGES` other
        changes, in order; the page lists them all."""
        others = [c for c in self.changes if not c.recipient][:ROW_CHANGES]
        return tuple(c for c in self.changes if c.recipient or c in others)

    @property
    def unlisted(self) -> int:
        return len(self.changes) - len(self.listed)

    @property
    def reason(self) -> str:
        """Why a stale proposal cannot run, in words."""
        parts = [f"{m.kind} {m.resource_id} was edited after this proposal: it is bound to "
                 f"revision {m.bound}, and revision {m.current} is now current"
                 for m in self.moved]
        return ("; ".join(parts) + ". This proposal can never run: approving it would be "
                "refused (stale_revision). Deny it; the new revision needs a proposal of its "
                "own.")


def _arguments(canonical: str) -> Any:
    parsed = json.loads(canonical)
    return parsed.get("arguments", {}) if isinstance(parsed, dict) else {}


def _within_resource(changes: list[FieldChange], arguments: Any) -> list[FieldChange]:
    """Changes named as the payload names them (`cc`, as the stale flag and the page's diff
    do), when the action takes one resource and nothing but it changed."""
    names = [name for name, value in arguments.items()
             if isinstance(value, dict) and {"id", "revision", "payload"} <= value.keys()] \
        if isinstance(arguments, dict) else []
    if len(names) != 1 or not all(c.field.startswith(names[0] + ".") for c in changes):
        return changes
    cut = len(names[0]) + 1
    return [replace(change, field=change.field[cut:]) for change in changes]


def change_view(proposal: Proposal, lineage: Lineage | None) -> ChangeView | None:
    """The flags of one proposal, from its `Lineage`; None when it neither is stale nor revises
    an earlier proposal."""
    if lineage is None:
        return None
    if lineage.moved:
        several = len(lineage.moved) > 1  # then each change names its resource
        # What the newer revision changes is not in this proposal: a recipient it adds is
        # listed as a change, never flagged as this proposal's new recipient.
        changes = [replace(change, recipient=False) for moved in lineage.moved
                   for change in field_changes(moved.bound_payload, moved.current_payload,
                                               moved.resource_id if several else "")]
        since = ("in the revisions now current (not this proposal's)" if several else
                 f"in revision {lineage.moved[0].current} (now current, not this proposal)")
        return ChangeView(moved=lineage.moved, changes=tuple(changes), since=since,
                          earlier_approval_id=None)
    earlier = lineage.earlier
    if earlier is None:
        return None
    arguments = _arguments(proposal.canonical)
    changes = _within_resource(field_changes(comparable(_arguments(earlier.canonical)),
                                             comparable(arguments)), arguments)
    return ChangeView(moved=(), changes=tuple(changes),
                      since=f"since revision {earlier.revision} (proposal "
                            f"{earlier.proposal_id})",
                      earlier_approval_id=earlier.approval_id)


def change_views(viewer: Principal, proposals: Sequence[Proposal]) -> dict[str, ChangeView]:
    """`change_view` of each proposal that has one, by proposal id, in a bounded number of
    queries (`proposal_lineage`)."""
    lineages = proposal_lineage(viewer=viewer, proposals=proposals)
    views = {}
    for proposal in proposals:
        view = change_view(proposal, lineages.get(proposal.id))
        if view is not None:
            views[proposal.id] = view
    return views
