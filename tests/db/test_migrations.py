"""Migrations keep existing data valid: rows written under the old schema mean the same after."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("dispatch", "0004_lease")]
AFTER = [("dispatch", "0005_proposal_call_scope")]


@pytest.fixture
def old_schema() -> Iterator[Any]:
    """The historical models before the call scope; the database is migrated forward after."""
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    try:
        yield executor.loader.project_state(BEFORE).apps
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())


def test_existing_calls_are_scoped_to_their_execution(old_schema: Any) -> None:
    tenant = old_schema.get_model("dispatch", "Tenant").objects.create(name="acme")
    agent = old_schema.get_model("dispatch", "Principal").objects.create(
        tenant=tenant, name="owner", kind="agent", tools=["crm.lookup"])
    old_proposal = old_schema.get_model("dispatch", "Proposal")

    def proposal(execution_id: str, call_id: str) -> str:
        return str(old_proposal.objects.create(
            tenant=tenant, principal=agent, execution_id=execution_id, operation="crm.lookup",
            contract_version=1, contract_fingerprint="sha256:x", arguments={}, canonical="{}",
            digest="sha256:y", destination_fingerprint="sha256:z", policy_fingerprint="sha256:w",
            call_id=call_id, created_at=datetime(2026, 1, 1, tzinfo=UTC)).id)

    # The agent runtime's calls: one call id in two executions, and a proposal without one.
    first, second = proposal("exe-1", "call-1"), proposal("exe-2", "call-1")
    plain = proposal("exe-3", "")

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)

    new_proposal = executor.loader.project_state(AFTER).apps.get_model("dispatch", "Proposal")
    scopes = dict(new_proposal.objects.values_list("id", "call_scope"))
    assert scopes == {first: "exe-1", second: "exe-2", plain: ""}
    # The call of exe-1 is still taken in its scope.
    with pytest.raises(IntegrityError), transaction.atomic():
        copy = new_proposal.objects.get(id=first)
        copy.id = "prp_copy"
        copy.save(force_insert=True)
