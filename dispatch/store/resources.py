"""A resource's compare-and-swap (docs/design.md#resources): the one conditional UPDATE that
`dispatch.services.resources.resource_move`, the owner of a resource's state, runs.

It moves a resource by an event only while it holds the revision the caller read and is in a
(kind, state) the transition tables allow the event from, each to its own target; nothing is
read. The statement is a family derived from the registered kinds' tables, one member per
event and set of kinds, built and declared when first needed (a kind registered later gets a
member of its own). Its parameters are named, the generated ones after the table's rows
(`kind_0`, `source_0`, `target_0`, ...): those are constants of the member, bound once with it,
so a call adds only its own values.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime

from dispatch.models import Resource
from dispatch.store.sql import run, statement, value
from protocols.lifecycle import RESOURCE_PROTOCOLS, ResourceEvent


@dataclass(frozen=True)
class _Move:
    sql: str
    params: dict[str, str]  # the CASE's and the WHERE's kinds, states and targets, by name


@functools.cache
def _move_statement(event: ResourceEvent, kinds: tuple[str, ...]) -> _Move | None:
    """The UPDATE of `move` for `event`, derived from the registered tables of `kinds`
    (`sources`); a registered table never changes, so its name is its key. None when no table
    allows `event` from any state."""
    pairs = [(kind, str(source), str(target)) for kind in kinds
             for (source, on), target in sorted(RESOURCE_PROTOCOLS[kind].transitions.items())
             if on == event]
    if not pairs:
        return None
    whens = " ".join(f'WHEN "kind" = %(kind_{n})s AND "state" = %(source_{n})s '
                     f"THEN %(target_{n})s" for n in range(len(pairs)))
    allowed = " OR ".join(f'("kind" = %(kind_{n})s AND "state" = %(source_{n})s)'
                          for n in range(len(pairs)))
    # Only placeholders are formatted in; every kind and state is a bound parameter.
    sql = statement(
        f"resource.move.{event.value}", derived=True,
        sql=f'UPDATE "dispatch_resource" SET "state" = CASE {whens} END, '
        '"updated_at" = %(now)s, "current_revision" = COALESCE(%(revision_to)s, '
        '"current_revision") '
        f'WHERE "id" = %(id)s AND "current_revision" = %(revision)s AND ({allowed})')
    return _Move(sql, {name: text for n, (kind, source, target) in enumerate(pairs)
                       for name, text in ((f"kind_{n}", kind), (f"source_{n}", source),
                                          (f"target_{n}", target))})


def move(*, id: str, revision: int, event: ResourceEvent, now: datetime,
         revision_to: int | None) -> bool:
    """Move resource `id` by `event` while its current revision is `revision` and its (kind,
    state) is one the registered tables allow `event` from, to that table's target, at `now`;
    `revision_to`: the new current revision the same update writes (an edit's). Whether it
    moved (False, too, when no table allows `event` at all): the caller says why not."""
    # The registered kinds are part of the key: a kind registered later moves too.
    found = _move_statement(event, tuple(sorted(RESOURCE_PROTOCOLS)))
    return found is not None and run(found.sql, {
        **found.params, "now": value(Resource, "updated_at", now),
        "revision_to": revision_to, "id": id, "revision": revision}) == 1
