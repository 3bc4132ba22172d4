"""The hot path's fixed SQL names the tables and columns the models really have."""

from __future__ import annotations

import re

import pytest

from dispatch.models import Attempt, AuditEvent, Operation, Permit, Proposal
from dispatch.services import audit, claims, operations, permits

pytestmark = pytest.mark.django_db(databases=[])  # needs the app registry, not a database

TABLES = {model._meta.db_table: model for model in (Attempt, AuditEvent, Operation, Permit,
                                                    Proposal)}
STATEMENTS = {
    "audit.AUDIT_INSERT": audit.AUDIT_INSERT,
    "permits.PERMIT_CLAIM": permits.PERMIT_CLAIM,
    "claims.LOCK_UNCANCELLED": claims.LOCK_UNCANCELLED,
    "claims._PG_CLAIM": claims._PG_CLAIM,
    "operations.OPERATION_INSERT": operations.OPERATION_INSERT,
    "operations._MOVE": operations._MOVE,
    "operations._END_ATTEMPT": operations._END_ATTEMPT,
    "operations._START": operations._START,
    "operations._HOLD": operations._HOLD,
    "operations._INSERT_ATTEMPT": operations._INSERT_ATTEMPT,
    "operations._PG_MOVE": operations._PG_MOVE,
    "operations._PG_MOVE_AND_END": operations._PG_MOVE_AND_END,
    "operations._PG_START": operations._PG_START,
}
COLUMNS = {column for model in TABLES.values() for column in
           (field.column for field in model._meta.concrete_fields)}


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_every_identifier_is_a_table_or_a_column(name: str) -> None:
    for identifier in re.findall(r'"([a-z_]+)"', STATEMENTS[name]):
        assert identifier in TABLES or identifier in COLUMNS, (name, identifier)


def test_the_tables_are_djangos_default_names() -> None:
    assert set(TABLES) == {"dispatch_attempt", "dispatch_auditevent", "dispatch_operation",
                           "dispatch_permit", "dispatch_proposal"}
