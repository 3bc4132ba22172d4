"""HTTP actions: a contract declared as data (docs/design.md#http-actions, docs/actions.md). Pure.

A team gates its own service with one file, `*.yaml` or `*.json`, in `ACTIONS_DIR`: the
contract's keys, where to send it, and how to ask afterwards whether it happened. This module
holds what a read file is (`ActionSpec`; `protocols.http_action_files` reads one, or says
where it is wrong with `ActionDiagnostic`s naming file, line and key), builds the
`OperationContract` it declares (`action_contract`), and says what an answer of the
destination means (`answer_outcome`, `lookup_verdict`). Reading the directory, resolving
hosts and sending are the shell's (`dispatch.http_actions`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import quote

from protocols.canonical import digest
from protocols.contracts import (
    ApprovalRequirement,
    AuthorityRequirement,
    Effect,
    Idempotency,
    OperationContract,
    Reconciliation,
    SchedulingContract,
)
from protocols.schemas import escape_pointer
from protocols.workflow.located import Pos

__all__ = [
    "ANSWER_FAILED_NO_EFFECT",
    "ActionDiagnostic",
    "ActionSpec",
    "Destination",
    "Lookup",
    "action_contract",
    "answer_outcome",
    "lookup_url",
    "lookup_verdict",
]

#: The answers that refuse the request itself: the service did nothing
#: (docs/design.md#http-actions).
ANSWER_FAILED_NO_EFFECT: Final = frozenset({400, 403, 404, 409, 422})
#: The answers after which the effect may have happened (docs/design.md#http-actions): 408,
#: 429 and every 5xx; any other answer that is neither 2xx nor a refusal above is treated the
#: same (a status the design does not name proves nothing): `answer_outcome`.

@dataclass(frozen=True)
class ActionDiagnostic:
    """One problem of one file: where (file, line, column) and which key (dotted)."""

    file: str
    line: int
    column: int
    key: str
    message: str

    def render(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


@dataclass(frozen=True)
class Destination:
    name: str  # the permit token's `aud`
    url: str
    method: str
    timeout_s: float


@dataclass(frozen=True)
class Lookup:
    url: str  # holds `{operation_id}`
    present: frozenset[int]
    absent: frozenset[int]


@dataclass(frozen=True)
class ActionSpec:
    """One valid action file. `content` is its canonical content (defaults materialized), the
    part of the contract fingerprint that pins the file (`content_digest`)."""

    file: str
    name: str
    version: int
    description: str
    input_schema: Mapping[str, Any]
    effects: frozenset[Effect]
    approval: ApprovalRequirement | None
    authority: Mapping[str, str]  # authority key -> argument name
    destination: Destination
    idempotency: Idempotency
    retries: int
    lookup: Lookup | None
    content: Mapping[str, Any]
    name_pos: Pos

    @property
    def content_digest(self) -> str:
        return digest(dict(self.content))


def action_contract(spec: ActionSpec, implementation_fingerprint: str) -> OperationContract:
    """The contract the file declares. `implementation_fingerprint` must pin the file's
    canonical content (`ActionSpec.content_digest`) as well as the code that sends it."""
    if spec.lookup is None:
        reconciliation = Reconciliation.NONE
    elif spec.lookup.absent:
        reconciliation = Reconciliation.PRESENCE_AND_ABSENCE
    else:
        reconciliation = Reconciliation.PRESENCE
    return OperationContract(
        qualified_name=spec.name,
        contract_version=spec.version,
        implementation_fingerprint=implementation_fingerprint,
        input_type=spec.input_schema,
        output_type={"type": "object"},
        authority_requirements=tuple(
            AuthorityRequirement(key, "/" + escape_pointer(argument))
            for key, argument in sorted(spec.authority.items())),
        possible_effects=spec.effects,
        approval_requirement=spec.approval,
        idempotency_contract=spec.idempotency,
        scheduling_contract=SchedulingContract(
            timeout=spec.destination.timeout_s,
            max_attempts=spec.retries if spec.idempotency is Idempotency.RECEIVER_DEDUP else 1),
        destination=spec.destination.name,
        reconciliation=reconciliation,
    )


def answer_outcome(status: int) -> Literal["completed", "failed_no_effect", "uncertain"]:
    """What the destination's answer to the request means (docs/design.md#http-actions): a 2xx
    is done; 400, 403, 404, 409 and 422 refuse it (no effect); anything else (408, 429, 5xx, and
    any status the design does not name) may follow an effect."""
    if 200 <= status < 300:
        return "completed"
    if status in ANSWER_FAILED_NO_EFFECT:
        return "failed_no_effect"
    return "uncertain"


def lookup_verdict(lookup: Lookup, status: int) -> Literal["present", "absent", "unknown"]:
    """What the lookup's answer proves: a `present` status the effect, an `absent` one its
    absence; any other answer proves nothing."""
    if status in lookup.present:
        return "present"
    if status in lookup.absent:
        return "absent"
    return "unknown"


def lookup_url(lookup: Lookup, operation_id: str) -> str:
    """The lookup's URL for one operation (its id percent-encoded)."""
    return lookup.url.replace("{operation_id}", quote(operation_id, safe=""))
