"""An operation's row and its attempts' rows (docs/design.md#outcomes, #dispatcher): the guarded
statements that `dispatch.services.operations` and the claim run.

Each move is one conditional UPDATE whose WHERE names the state the transition table allows
the event from and the attempt the change settles; an attempt row's end is guarded by
`ended_at IS NULL`. Each function answers whether every guard held: when it did not, the
caller's transaction must roll back (on PostgreSQL the same statements are one round trip, a
data-modifying CTE, which may have moved the operation before its attempt's guard failed).

`load_for_worker` is the worker's one fixed query for an operation and what it runs with.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connection

from dispatch.models import Attempt, Operation, Permit, Principal, Proposal
from dispatch.store import audit
from dispatch.store.sql import (
    cache_related,
    columns,
    instances,
    is_postgres,
    rows,
    run,
    statement,
    value,
)
from protocols.jsontypes import JSONObject
from protocols.lifecycle import OperationState

_CLAIMED = OperationState.CLAIMED.value

_MOVE = statement(
    "operation.move",
    'UPDATE "dispatch_operation" SET "state" = %(target)s, "updated_at" = %(now)s, '
    '"result" = CASE WHEN %(answers)s THEN %(result)s ELSE "result" END, '
    '"evidence" = COALESCE(%(evidence)s, "evidence"), "uncertain" = %(uncertain)s '
    'WHERE "id" = %(id)s AND "state" = %(source)s AND "attempts_made" = %(attempt)s '
    'AND "uncertain" = %(was_uncertain)s AND (%(any_update)s OR "updated_at" = %(updated_at)s)')
_END = statement(
    "attempt.end",
    'UPDATE "dispatch_attempt" SET "ended_at" = %(now)s, "outcome" = %(outcome)s, '
    '"error" = %(error)s '
    'WHERE "operation_id" = %(id)s AND "number" = %(attempt)s AND "ended_at" IS NULL')
#: Whether agent `hearer` holds a live webhook endpoint (docs/design.md#notifications), answered
#: by the outcome's own statement: an agent without one costs the outcome no read of its
#: endpoints, and one registered or deleted while the handler ran is seen as it is when the
#: move is written. A NULL `hearer` (a state no agent hears of) matches none.
_HEARD = ('EXISTS (SELECT 1 FROM "dispatch_webhookendpoint" w '
          'WHERE w."principal_id" = %(hearer)s AND w."deleted_at" IS NULL)')
#: Whether the operation's execution `execution_id` is one of the store's runs: only a run's
#: lanes wait for a slot its settled action frees (a wait belongs to a run's row), so a settled
#: action outside any run wakes nothing and reads nothing after its commit.
_IN_RUN = 'EXISTS (SELECT 1 FROM "dispatch_execution" e WHERE e."id" = %(execution_id)s)'
# SQLite: the move answers its row (the guard's count) with what its caller needs to know.
_MOVE_ANSWERED = statement("operation.move_answered", vendor="sqlite",
                           sql=f"{_MOVE} RETURNING {_HEARD}, {_IN_RUN}")
# PostgreSQL: the same writes in one round trip. Every writer of an attempt row updates its
# operation row first, so that row's lock orders them; the attempt moves only where the
# operation did, and the audit row is written only where both did.
_PG_MOVE_AND_END = statement(
    "operation.move_and_end", vendor="postgresql",
    sql=f"WITH op AS ({_MOVE} RETURNING 1), "
    f"att AS ({_END} AND EXISTS (SELECT 1 FROM op) RETURNING 1), "
    f"au AS ({audit.insert_if('att')}) "
    f"SELECT (SELECT count(*) FROM op), (SELECT count(*) FROM att), {_HEARD}, {_IN_RUN}")
_PG_MOVE = statement(
    "operation.move_with_audit", vendor="postgresql",
    sql=f"WITH op AS ({_MOVE} RETURNING 1), au AS ({audit.insert_if('op')}) "
    f"SELECT (SELECT count(*) FROM op), 1, {_HEARD}, {_IN_RUN}")
# A new attempt starts only where the one before it has ended (none is open).
_START = statement(
    "attempt.start_guard",
    'UPDATE "dispatch_operation" SET "attempts_made" = %(number)s, "updated_at" = %(now)s, '
    '"next_attempt_at" = NULL '
    f'WHERE "id" = %(id)s AND "state" = \'{_CLAIMED}\' AND "attempts_made" = %(previous)s '
    'AND NOT EXISTS (SELECT 1 FROM "dispatch_attempt" a '
    'WHERE a."operation_id" = "dispatch_operation"."id" AND a."ended_at" IS NULL)')
_ATTEMPT_COLUMNS = ('"operation_id", "number", "started_at", "ended_at", "outcome", "error"')
_ATTEMPT_VALUES = "%(id)s, %(number)s, %(now)s, NULL, '', ''"
_INSERT_ATTEMPT = statement(
    "attempt.insert", vendor="sqlite",
    sql=f'INSERT INTO "dispatch_attempt" ({_ATTEMPT_COLUMNS}) VALUES ({_ATTEMPT_VALUES})')
_PG_START = statement(
    "attempt.start", vendor="postgresql",
    sql=f"WITH op AS ({_START} RETURNING 1), "
    f'att AS (INSERT INTO "dispatch_attempt" ({_ATTEMPT_COLUMNS}) SELECT {_ATTEMPT_VALUES} '
    "WHERE EXISTS (SELECT 1 FROM op) RETURNING 1), "
    f"au AS ({audit.insert_if('op')}) "
    "SELECT count(*) FROM op")
# An uncertain attempt ends while the operation stays claimed for a retry under the same key;
# the operation remembers the uncertainty (sticky, docs/design.md#outcomes).
_HOLD = statement(
    "operation.hold",
    'UPDATE "dispatch_operation" SET "uncertain" = TRUE, "next_attempt_at" = %(retry_at)s, '
    f'"updated_at" = %(now)s WHERE "id" = %(id)s AND "state" = \'{_CLAIMED}\' '
    'AND "attempts_made" = %(attempt)s')

_INSERT_COLUMNS = (
    '"id", "tenant_id", "proposal_id", "permit_id", "principal_id", "execution_id", '
    '"operation", "contract_fingerprint", "state", "attempts_made", "uncertain", '
    '"next_attempt_at", "result", "evidence", "lookup_found", "looked_up_at", "claimed_at", '
    '"updated_at"')
_INSERT_VALUES = (
    "%(id)s, %(tenant_id)s, %(proposal_id)s, %(permit_id)s, %(principal_id)s, "
    "%(execution_id)s, %(operation)s, %(contract_fingerprint)s, "
    f"'{_CLAIMED}', 0, FALSE, NULL, NULL, '', '', NULL, %(now)s, %(now)s")
INSERT = statement(
    "operation.insert",
    f'INSERT INTO "dispatch_operation" ({_INSERT_COLUMNS}) VALUES ({_INSERT_VALUES})')


def insert_if(after: str) -> str:
    """The claim's insert as a part of a CTE: written only where the part named `after` (the
    lock) changed a row."""
    return (f'INSERT INTO "dispatch_operation" ({_INSERT_COLUMNS}) SELECT {_INSERT_VALUES} '
            f"WHERE EXISTS (SELECT 1 FROM {after}) RETURNING 1")


def claimed(*, id: str, tenant_id: str, proposal_id: str, permit_id: str | None,
            principal_id: str, execution_id: str | None, operation: str,
            contract_fingerprint: str, now: datetime) -> dict[str, Any]:
    """The values of a new operation, `claimed` at `now` (the claim's insert)."""
    return {"id": id, "tenant_id": tenant_id, "proposal_id": proposal_id,
            "permit_id": permit_id, "principal_id": principal_id, "execution_id": execution_id,
            "operation": operation, "contract_fingerprint": contract_fingerprint,
            "now": value(Operation, "claimed_at", now)}


def insert(operation: dict[str, Any]) -> None:
    """Write a new operation (`claimed`); an `IntegrityError` if its proposal has one."""
    run(INSERT, operation)


class Moved(NamedTuple):
    """What `move` answers."""

    held: bool  # every guard held; else the caller rolls its transaction back
    heard: bool  # the agent it was asked about (`hearer`) holds a live webhook endpoint
    in_run: bool  # the operation's execution is a run's (a lane of it may wait for a slot)


def move(*, id: str, source: OperationState, target: OperationState, attempt: int,
         was_uncertain: bool, uncertain: bool, now: datetime, answers: bool,
         result: JSONObject | None, evidence: str | None, updated_at: datetime | None,
         end: str | None, error: str, event: audit.AuditRow, hearer: str | None,
         execution_id: str | None) -> Moved:
    """Move operation `id` from `source` to `target` as the settlement of attempt `attempt`,
    while its uncertainty is `was_uncertain` (and its `updated_at` is `updated_at`, when
    given); `end`: end that attempt's open row with this outcome and `error`; the audit `event`
    with them. `answers`: `result` replaces the operation's result. Answers whether every guard
    held (when one did not, the caller rolls its transaction back) and, in the same statement,
    whether principal `hearer` (None: nobody) holds a live webhook endpoint and whether
    `execution_id` (the operation's) is a run's."""
    params = {
        "id": id, "source": source.value, "target": target.value, "attempt": attempt,
        "was_uncertain": was_uncertain, "uncertain": uncertain,
        "now": value(Operation, "updated_at", now), "answers": answers,
        "result": value(Operation, "result", result), "evidence": evidence,
        "any_update": updated_at is None,
        "updated_at": value(Operation, "updated_at", updated_at),
        "outcome": end, "error": error, "hearer": hearer, "execution_id": execution_id}
    if is_postgres():
        sql = _PG_MOVE_AND_END if end is not None else _PG_MOVE
        ((moved, ended, heard, in_run),) = rows(sql, {**params, **event.params})
        return Moved(moved == 1 and ended == 1, bool(heard), bool(in_run))
    found = rows(_MOVE_ANSWERED, params)
    if len(found) != 1 or (end is not None and run(_END, params) != 1):
        return Moved(False, False, False)
    run(audit.INSERT, event.params)
    ((heard, in_run),) = found
    return Moved(True, bool(heard), bool(in_run))


def start(*, id: str, number: int, previous: int, now: datetime, event: audit.AuditRow) -> bool:
    """Move operation `id`'s latest attempt from `previous` to `number` while it is claimed and
    no attempt of it is open, insert attempt `number`'s row and the audit `event`; False (and
    nothing written) when the guard did not hold."""
    params = {"id": id, "number": number, "previous": previous,
              "now": value(Attempt, "started_at", now)}
    if is_postgres():
        ((started,),) = rows(_PG_START, {**params, **event.params})
        return bool(started == 1)
    if run(_START, params) != 1:
        return False
    run(_INSERT_ATTEMPT, params)
    run(audit.INSERT, event.params)
    return True


def hold(*, id: str, attempt: int, now: datetime, retry_at: datetime, error: str) -> bool:
    """End attempt `attempt` of claimed operation `id` as uncertain, the operation due again at
    `retry_at` and uncertain from now on. False when a guard did not hold: the caller rolls
    back."""
    params = {"id": id, "attempt": attempt, "now": value(Operation, "updated_at", now),
              "retry_at": value(Operation, "next_attempt_at", retry_at),
              "outcome": Attempt.Outcome.UNCERTAIN, "error": error}
    return run(_HOLD, params) == 1 and run(_END, params) == 1


@functools.cache
def _load_for_worker(vendor: str) -> str:
    return statement(
        "operation.load_for_worker",
        f"SELECT {columns(Operation, 'o')}, {columns(Proposal, 'p')}, "
        f"{columns(Principal, 'r')}, {columns(Permit, 'm')} FROM \"dispatch_operation\" o "
        'JOIN "dispatch_proposal" p ON p."id" = o."proposal_id" '
        'JOIN "dispatch_principal" r ON r."id" = o."principal_id" '
        'LEFT JOIN "dispatch_permit" m ON m."id" = o."permit_id" '
        'WHERE o."id" = %(id)s')


def load_for_worker(*, id: str) -> Operation | None:
    """Operation `id` with its proposal, its principal and its permit (each cached; no permit
    for an action without one), in one fixed query: what a worker runs it with. None when
    there is no such operation."""
    found = rows(_load_for_worker(connection.vendor), {"id": id})
    if not found:
        return None
    operation, proposal, principal, permit = instances(found[0], Operation, Proposal,
                                                       Principal, Permit)
    cache_related(operation, "proposal", proposal)
    cache_related(operation, "principal", principal)
    cache_related(operation, "permit", permit)
    return operation  # type: ignore[no-any-return]
