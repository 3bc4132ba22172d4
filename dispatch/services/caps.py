"""Spend caps (docs/design.md#approval-policies): the sum of an amount argument per agent or
tenant per hour or day, charged in the claim's own transaction like a budget.

`protocols.approval_rules.cap_charges` says which counters a claim charges and how much; this
module takes them with the budgets' conditional upsert (`counters_take`), all or nothing: a cap the
action would exceed refuses the claim (`budget_exhausted`, naming the cap), and the claim's rollback
undoes every counter it charged. A cap sums one currency: an action in a currency no cap of its
operation sums is refused too, naming the currency. The sum a counter holds is a whole number of
ten-thousandths (`CAP_PLACES`), so both stores add it exactly. A charge is spent at the claim and
never given back: an action that ended without effect still counts, so the cap errs toward spending
less, never more.
"""

from __future__ import annotations

from collections.abc import Sequence

from dispatch.services.budgets import counters_take
from protocols.approval_rules import CapCharge
from protocols.denials import Denial, DenialCode


def caps_take(charges: Sequence[CapCharge]) -> None:
    """Charge every cap in `charges`, or raise `budget_exhausted` naming the first one the
    action would take over its sum (or whose amount cannot be counted). Inside the claim's
    transaction, whose rollback undoes it."""
    for charge in charges:
        if charge.uncapped is not None:
            raise _uncapped(charge, charge.uncapped)
        if charge.units is None:
            raise _exhausted(charge, "its amount cannot be counted against the cap")
    full = counters_take([(charge.counter, charge.units or 0, charge.limit)
                          for charge in charges], rebind=True)
    if full is not None:
        [charge] = [charge for charge in charges if charge.counter == full]
        raise _exhausted(charge, "it would take the sum over the cap")


def _exhausted(charge: CapCharge, why: str) -> Denial:
    cap = charge.declaration()
    return Denial(
        DenialCode.BUDGET_EXHAUSTED,
        f"A spend cap refuses this action, {why}: at most {cap['sum']} of "
        f"'{cap['argument']}' of {cap['operation']} per {cap['per']} per {cap['scope']}. "
        f"Wait for the next {cap['per']} (UTC), or ask an admin.",
        budget="cap", cap=cap)


def _uncapped(charge: CapCharge, currency: str) -> Denial:
    operation = charge.rule.operation
    return Denial(
        DenialCode.BUDGET_EXHAUSTED,
        f"No spend cap of {operation} sums {currency}: a cap sums one currency, and an action "
        f"in a currency no cap names is refused. Use a currency a cap of {operation} names, or "
        f"ask an admin to cap {currency} too.",
        budget="cap", operation=operation, currency=currency)
