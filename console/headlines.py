"""The sentence on top of an action, wherever the console shows one (the queue, an approval,
the Decided tab, the audit): its summary, its effect classes (neutral) and its large-amount
flag (red)."""

from __future__ import annotations

from console.presenters import Headline, headline
from dispatch.runtime import get_runtime
from dispatch.selectors.contracts import action_summary
from protocols.contracts import OperationContract
from protocols.jsontypes import JSONObject


def action_headline(operation: str, contract: OperationContract | None,
              arguments: JSONObject) -> Headline:
    """The sentence on top of an approval, with its effect classes and large-amount flag."""
    summary = action_summary(operation, contract, arguments)
    effects = [e.value for e in contract.possible_effects] if contract else []
    # Large where the deployment's rules ask more approvers for the amount, in its currency.
    return headline(summary, effects, get_runtime().large_amount(operation, arguments))
