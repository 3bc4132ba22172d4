"""One presentation of an action, wherever the console shows it whole (an approval, an
operation, a renewal): its sentence, each resource a contract presents as a message (an email
as an email: From, To, Cc, Subject, the body), and every other argument's leaves as rows, so
that nothing is shown twice and nothing is hidden."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from console.headlines import action_headline
from console.presenters import Headline, MessageView, compact_json, flatten, message_view
from dispatch.selectors.contracts import contract_for_fingerprint, resource_presentations
from protocols.contracts import OperationContract


@dataclass(frozen=True)
class ActionView:
    contract: OperationContract | None
    headline: Headline
    messages: list[MessageView]
    #: (dotted path, value) of every argument leaf that no message above shows.
    fields: list[tuple[str, str]]


def action_view(operation: str, contract_fingerprint: str, snapshot: Any) -> ActionView:
    contract = contract_for_fingerprint(contract_fingerprint)
    arguments = snapshot.get("arguments", {}) if isinstance(snapshot, dict) else {}
    shown = [view for view in (
        message_view(argument, kind, presentation, arguments.get(argument))
        for argument, (kind, presentation) in resource_presentations(contract).items()
    ) if view is not None]
    names = {view.argument for view in shown}
    return ActionView(
        contract=contract,
        headline=action_headline(operation, contract, arguments),
        messages=shown,
        fields=[(path, compact_json(value)) for path, value in flatten(arguments)
                if path.partition(".")[0] not in names],
    )
