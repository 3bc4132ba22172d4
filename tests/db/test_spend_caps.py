"""Spend caps (docs/design.md#approval-policies): a rule caps the sum of an amount argument per
agent or tenant per hour or day, charged in the claim's transaction like a budget; the claim
that would go over it is `budget_exhausted`, naming the cap, and holds nothing."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch.models import BudgetCounter, Operation
from dispatch.runtime import get_runtime
from dispatch.services.approvals import approval_decide
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.proposals import proposal_create
from protocols.denials import Denial, DenialCode
from tests.conftest import World
from tests.support.caps import deploy, second_agent, tenant_cap

__all__ = ["tenant_cap"]

# The runtime is rebuilt from each test's rules, and again after it.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_runtime")]


def agent_cap(total: str, **when: Any) -> list[dict[str, Any]]:
    """A cap of `total` EUR a day per agent (in another currency where `when` names it)."""
    when = {"currency": {"eq": "EUR"}, **when}
    return [{"operation": "payments.transfer", "when": when,
             "cap": {"argument": "amount", "sum": total, "per": "day", "scope": "agent"}}]


def pay(world: World, amount: str, *, agent: Any = None, currency: str = "EUR") -> Operation:
    """Propose a transfer, have it approved and dispatch it: the claim charges the cap."""
    agent = agent or world.owner
    proposal = proposal_create(principal=agent, operation="payments.transfer", arguments={
        "from_account": "acct-001", "to_account": "acct-999", "amount": amount,
        "currency": currency, "memo": ""}, now=world.now)
    approval_decide(approver=world.approver, approval_id=proposal.approval.id,
                    decision="grant", digest=proposal.digest, now=world.now)
    return proposal_dispatch(principal=agent, proposal_id=proposal.id, now=world.now,
                             enqueue=False)


def refused(world: World, amount: str, **kwargs: Any) -> Denial:
    with pytest.raises(Denial) as denial:
        pay(world, amount, **kwargs)
    return denial.value


def counters() -> dict[str, int]:
    return dict(BudgetCounter.objects.filter(key__startswith="cap:").values_list("key", "used"))


def test_a_claim_over_the_cap_is_budget_exhausted_naming_the_cap(
    world: World, settings: Any,
) -> None:
    deploy(settings, agent_cap("50000.00"))
    pay(world, "30000.00")
    before = counters()
    denial = refused(world, "20000.01")
    assert denial.code is DenialCode.BUDGET_EXHAUSTED and denial.status == 429
    assert denial.details == {"budget": "cap", "cap": {
        "operation": "payments.transfer", "when": {"currency": {"eq": "EUR"}},
        "argument": "amount", "sum": "50000.00", "per": "day", "scope": "agent"}}
    assert "at most 50000.00 of 'amount' of payments.transfer per day per agent" in \
        denial.message
    assert counters() == before  # the refused claim charged nothing
    assert Operation.objects.count() == 1
    pay(world, "20000.00")  # exactly up to the cap
    assert list(counters().values()) == [50000_0000]  # ten-thousandths


def test_the_counter_adds_cents_exactly(world: World, settings: Any) -> None:
    deploy(settings, agent_cap("0.03"))
    for _ in range(3):
        pay(world, "0.01")
    assert refused(world, "0.01").details["budget"] == "cap"


def test_an_agent_cap_counts_each_agent_apart(world: World, settings: Any) -> None:
    deploy(settings, agent_cap("100.00"))
    other = second_agent()
    pay(world, "100.00")
    pay(world, "100.00", agent=other)
    assert refused(world, "0.01", agent=other).code is DenialCode.BUDGET_EXHAUSTED


@pytest.mark.usefixtures("tenant_cap")
def test_a_tenant_cap_counts_every_agent_of_the_tenant(world: World) -> None:
    other = second_agent()
    pay(world, "30000.00")
    denial = refused(world, "30000.00", agent=other)
    assert denial.details["cap"]["scope"] == "tenant"
    pay(world, "20000.00", agent=other)


def test_a_cap_applies_only_where_its_conditions_hold(world: World, settings: Any) -> None:
    deploy(settings, [*agent_cap("1000.00"), *agent_cap("10.00", currency={"eq": "USD"})])
    pay(world, "500.00")  # EUR: its own cap
    pay(world, "10.00", currency="USD")
    denial = refused(world, "0.01", currency="USD")
    assert denial.details["cap"]["when"] == {"currency": {"eq": "USD"}}


def test_a_lowered_sum_binds_the_window_already_counted(world: World, settings: Any) -> None:
    deploy(settings, agent_cap("100.00"))
    pay(world, "60.00")
    deploy(settings, agent_cap("80.00"))  # a new policy: new proposals, the same counter
    assert refused(world, "30.00").details["cap"]["sum"] == "80.00"
    pay(world, "20.00")


def test_a_deployment_with_caps_starts(settings: Any) -> None:
    deploy(settings, agent_cap("1.00"))
    assert get_runtime().policy.approval_rules[0].cap is not None
