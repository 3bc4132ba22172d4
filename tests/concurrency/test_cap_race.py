"""A spend cap reached by two agents' payments racing across OS processes, on the real database
(docs/design.md#approval-policies): the sum never exceeds the cap. The first claim stands inside
its transaction, its charge written, uncommitted; the second claim begins then and must wait for
it, then find the cap spent (`budget_exhausted`), whatever the store."""

from __future__ import annotations

import time
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest

from dispatch.models import BudgetCounter, Operation
from dispatch.services.proposals import proposal_create
from tests.conftest import World, make_world
from tests.support.caps import TENANT_CAP_ENV, second_agent, tenant_cap
from tests.support.paused import PausedChild

__all__ = ["tenant_cap"]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow,
              pytest.mark.usefixtures("tenant_cap")]


@pytest.fixture
def world(now: datetime) -> World:
    return make_world(now)


def test_two_agents_racing_to_the_tenant_cap_never_exceed_it(world: World,
                                                             tmp_path: Path) -> None:
    other = second_agent()
    first = world.propose_transfer("30000.00")
    world.grant(first)
    second = proposal_create(principal=other, operation="payments.transfer", arguments={
        "from_account": "acct-001", "to_account": "acct-555", "amount": "30000.00",
        "currency": "EUR", "memo": ""}, now=world.now)
    world.grant(second)
    with PausedChild(tmp_path, "dispatch", world.owner.id, first.id,
                     pause="claim.before_commit", **TENANT_CAP_ENV) as a, \
            PausedChild(tmp_path, "dispatch", other.id, second.id,
                        pause="dispatch.before_claim", **TENANT_CAP_ENV) as b:
        a.reached()  # 30,000.00 charged to the tenant's counter, not committed
        b.reached()  # every check made, its claim not begun
        b.release()
        time.sleep(1.0)
        assert b.proc.poll() is None, "the second claim did not wait for the first"
        assert "operation_id" in a.result()
        assert b.result() == {"denied": "budget_exhausted"}
    [operation] = Operation.objects.all()
    assert operation.proposal_id == first.id
    [(used, limit)] = BudgetCounter.objects.filter(key__startswith="cap:").values_list(
        "used", "limit")
    assert (used, limit) == (30000_0000, 50000_0000)  # ten-thousandths
    spent = sum(Decimal(op.proposal.arguments["amount"]) for op in Operation.objects.all())
    assert spent <= Decimal("50000.00")
