"""What an extension may add to a contract besides its handler: an outcome hook and admission
checks (`Runtime.register(contract, handler, on_outcome=..., admission=...)`).

- An **admission check** runs in `dispatch.services.admission.admit`, at every stage (proposal,
  decision, dispatch, retry), after the resources are resolved and before their states and
  the authority are checked: it returns the `Denial` that refuses the action, or None. What a
  proposal must carry beyond its arguments' schema (a passing attestation of this exact
  revision, a source on an allow-list) is such a check.
- An **outcome hook** runs in `dispatch.services.operations.operation_move`, before the move,
  with an `OutcomeContext`; it returns an `Issuance` (the result the operation keeps and a
  `write` that runs inside the outcome's transaction, only where the move holds) or None. The
  trusted records an outcome issues (a receipt, an attestation: `dispatch.services.evidence`)
  are written only by such a `write`: their store services take the context, which only
  `operation_move` mints.

Neither may do I/O beyond the store: both run inside the dispatcher's checks and transactions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from protocols.contracts import OperationContract
from protocols.denials import Denial
from protocols.jsontypes import JSONObject
from protocols.lifecycle import OperationState

if TYPE_CHECKING:
    from dispatch.models import Operation, Principal

_MINT = object()


@dataclass(frozen=True)
class AdmissionContext:
    """What an admission check sees: the contract, the principal acting, the validated
    arguments as given and as resolved through the store (each resource argument with its
    `id`, `revision`, `digest`, `payload` and `links`)."""

    contract: OperationContract
    principal: Principal
    arguments: JSONObject
    resolved: JSONObject


@dataclass(frozen=True)
class OutcomeContext:
    """The move an outcome hook is asked about: `operation` moves to `target` with `result`
    (None when reconciliation established it: no answer to issue from), at `now`, under
    `contract` (the one the proposal was made under, or the newest of its name);
    `arguments` are the arguments the snapshot bound. Minted by `operation_move` only."""

    operation: Operation
    contract: OperationContract
    target: OperationState
    result: JSONObject | None
    arguments: JSONObject
    now: datetime
    mint: object = field(repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.mint is not _MINT:
            raise TypeError("an OutcomeContext is minted by operation_move only")


@dataclass(frozen=True)
class Issuance:
    """What an outcome issues: `result` is what the operation keeps (the handler's answer,
    with the record in it), `write` writes the record and its audit event, inside the
    transaction that moves the operation and only once that move has held."""

    result: JSONObject | None
    write: Callable[[], None]


AdmissionCheck = Callable[[AdmissionContext], "Denial | None"]
OutcomeHook = Callable[[OutcomeContext], "Issuance | None"]


def outcome_context(
    *, operation: Operation, contract: OperationContract, target: OperationState,
    result: JSONObject | None, arguments: JSONObject, now: datetime,
) -> OutcomeContext:
    """For `dispatch.services.operations.operation_move` only (`OutcomeContext`)."""
    return OutcomeContext(operation, contract, target, result, arguments, now, _MINT)
