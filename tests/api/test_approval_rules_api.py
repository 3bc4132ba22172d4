"""Approval rules over REST (docs/design.md#approval-policies): an amount rule names its currency,
a currency no rule names is held to the strictest rule, a cap sums one currency, and a vote
counts while its voter is active and holds the role. The rules are deployed as the environment
gives them (`APPROVAL_RULES`, JSON)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dispatch.models import Permit, Principal
from dispatch.services.principals import human_create, token_issue
from tests.api.conftest import Caller, assert_error
from tests.conftest import World
from tests.support.caps import deploy

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_runtime")]

#: Two operators for 10,000.00 EUR or more; the deployment names no other currency.
EUR_FOUR_EYES = json.dumps([{"operation": "payments.transfer", "quorum": 2, "when": {
    "amount": {"gte": "10000.00"}, "currency": {"eq": "EUR"}}}])
#: At most 100.00 EUR and 10,000 JPY a day, per agent.
EUR_AND_JPY_CAPS = json.dumps([
    {"operation": "payments.transfer", "when": {"currency": {"eq": currency}},
     "cap": {"argument": "amount", "sum": total, "per": "day", "scope": "agent"}}
    for currency, total in (("EUR", "100.00"), ("JPY", "10000"))])


@pytest.fixture
def rules(settings: Any) -> Iterator[Callable[[str], None]]:
    """Deploy `APPROVAL_RULES` as the environment's JSON string."""
    yield lambda raw: deploy(settings, json.loads(raw))
    deploy(settings, [])


def propose(owner: Caller, amount: str, currency: str, memo: str = "") -> dict[str, Any]:
    response = owner.post("proposals/", {"operation": "payments.transfer", "arguments": {
        "from_account": "acct-001", "to_account": "acct-999", "amount": amount,
        "currency": currency, "memo": memo}})
    assert response.status_code == 201, response.content
    return dict(response.json())


def vote(approver: Caller, proposal: dict[str, Any]) -> dict[str, Any]:
    response = approver.post(f"approvals/{proposal['approval']['id']}/decision/",
                             {"decision": "grant", "digest": proposal["digest"]})
    assert response.status_code == 200, response.content
    return dict(response.json())


def operator(name: str, role: str = "operator") -> tuple[Principal, Caller]:
    from django.test import Client

    principal, _ = human_create(name=name, tenant="acme", role=role, password="pw")
    return principal, Caller(Client(), token_issue(principal=principal))


def pay(owner: Caller, approver: Caller, amount: str, currency: str) -> Any:
    proposal = propose(owner, amount, currency)
    vote(approver, proposal)
    return owner.post(f"proposals/{proposal['id']}/dispatch/")


def test_an_amount_in_a_currency_no_rule_names_needs_the_strictest_quorum(
    owner: Caller, caller: Any, rules: Callable[[str], None],
) -> None:
    rules(EUR_FOUR_EYES)
    # 9,999.99 KWD is about 30,000 EUR: no rule names KWD, so the strictest rule's quorum.
    kwd = propose(owner, "9999.99", "KWD")
    assert kwd["approval"]["quorum"] == 2
    first = vote(caller("approver"), kwd)
    assert (first["approval"]["state"], first["permit_id"]) == ("pending", None)
    # The rule's own currency is read as written: below its threshold, one operator.
    assert propose(owner, "9999.99", "EUR")["approval"]["quorum"] == 1
    assert propose(owner, "10000.00", "EUR")["approval"]["quorum"] == 2
    # Another currency never lowers the bar, however small the amount.
    assert propose(owner, "1", "JPY")["approval"]["quorum"] == 2


def test_a_cap_sums_one_currency_and_a_currency_no_cap_names_is_refused(
    owner: Caller, caller: Any, rules: Callable[[str], None],
) -> None:
    rules(EUR_AND_JPY_CAPS)
    approver = caller("approver")
    # 10,000 JPY is the whole yen allowance and none of the euro one.
    assert pay(owner, approver, "10000", "JPY").status_code == 202
    assert pay(owner, approver, "100.00", "EUR").status_code == 202
    details = assert_error(pay(owner, approver, "1", "JPY"), 429, "budget_exhausted")
    assert details["cap"]["when"] == {"currency": {"eq": "JPY"}}
    details = assert_error(pay(owner, approver, "0.01", "EUR"), 429, "budget_exhausted")
    assert details["cap"]["when"] == {"currency": {"eq": "EUR"}}
    # No cap sums CHF: refused, naming the currency, however small the amount.
    refused = pay(owner, approver, "0.01", "CHF")
    details = assert_error(refused, 429, "budget_exhausted")
    assert details["currency"] == "CHF" and details["budget"] == "cap"
    assert "CHF" in refused.json()["error"]["message"]


def test_a_deactivated_or_demoted_earlier_voter_no_longer_counts(
    owner: Caller, caller: Any, rules: Callable[[str], None],
) -> None:
    rules(EUR_FOUR_EYES)
    for change in ("deactivated", "demoted"):
        proposal = propose(owner, "25000.00", "EUR")
        earlier, earlier_caller = operator(f"early-{change}")
        vote(earlier_caller, proposal)
        if change == "deactivated":
            assert earlier.user is not None
            earlier.user.is_active = False
            earlier.user.save(update_fields=["is_active"])
        else:
            Principal.objects.filter(id=earlier.id).update(role="")
        # Two grants recorded, one of them by someone who may no longer approve: no permit.
        second = vote(caller("approver") if change == "deactivated" else operator(
            "second-demoted")[1], proposal)
        assert (second["approval"]["state"], second["permit_id"]) == ("pending", None)
        assert len(second["approval"]["votes"]) == 1  # the grants that count, and only those
        assert not Permit.objects.filter(proposal_id=proposal["id"]).exists()
        third = vote(operator(f"third-{change}")[1], proposal)
        assert third["approval"]["state"] == "granted" and third["permit_id"]


def test_a_renewal_of_a_four_eyes_action_needs_two_votes(
    live: World, caller: Any, rules: Callable[[str], None],
    django_capture_on_commit_callbacks: Any, eager: None,
) -> None:
    from tests.db.test_renewals import stopped_transfer

    rules(EUR_FOUR_EYES)
    other, other_caller = operator("approver2")

    def grant_twice(proposal: Any) -> None:
        live.grant(proposal)
        live.grant(proposal, approver=other)

    operation = stopped_transfer(live, amount="25000.00", approve=grant_twice)
    assert operation.proposal.approval.quorum == 2
    admin = caller("admin")
    renewal = admin.post(f"operations/{operation.id}/reauthorize/", {}).json()
    decision = {"decision": "grant", "digest": renewal["digest"]}
    first = caller("approver").post(f"renewals/{renewal['id']}/decision/", decision)
    assert first.status_code == 200, first.content
    assert first.json()["state"] == "pending"  # one of two: the operation stays unknown
    assert admin.get(f"operations/{operation.id}/").json()["state"] == "unknown"
    again = caller("approver").post(f"renewals/{renewal['id']}/decision/", decision)
    assert_error(again, 409, "approval_decided")
    with django_capture_on_commit_callbacks(execute=True):
        second = other_caller.post(f"renewals/{renewal['id']}/decision/", decision)
    assert second.status_code == 200, second.content
    assert second.json()["state"] == "granted"
    assert admin.get(f"operations/{operation.id}/").json()["state"] == "completed"
