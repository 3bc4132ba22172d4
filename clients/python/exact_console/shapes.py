"""The shapes of the API's answers (docs/rest-api.md, "Calls" and "A proposal"), as the
`TypedDict`s the client's methods are annotated with. They type the answers for a checker and
an editor; at run time an answer is still the plain `dict` of the JSON the console sent, keys
these do not name included, and nothing here validates it.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

__all__ = ["AgentCreated", "AgentToken", "Approval", "ApprovalItem", "ApprovalRef",
           "ApprovalState", "ApprovalsPage", "Attempt", "AuditEvent", "AuditPage", "Contract",
           "ContractsPage", "Decision", "DecisionApproval", "Dispatched", "Grant", "GrantsPage",
           "Jwk", "Jwks", "Operation", "Pause", "Proposal", "Resource", "Vote", "Webhook",
           "WebhookCreated", "WebhooksPage"]

#: An approval's states (docs/rest-api.md#states).
ApprovalState = Literal["pending", "granted", "denied", "expired", "revoked"]


class Contract(TypedDict):
    """One contract of `GET contracts/`: `approval` is None when it runs without one."""

    name: str
    version: int
    fingerprint: str
    input_schema: dict[str, Any]
    effects: list[str]
    approval: dict[str, Any] | None
    idempotency: str


class ContractsPage(TypedDict):
    results: list[Contract]


class Resource(TypedDict):
    """A resource at one revision (`POST resources/`, `GET resources/{id}/`)."""

    id: str
    kind: str
    revision: int
    digest: str
    state: str
    payload: dict[str, Any]


class ApprovalRef(TypedDict):
    """A proposal's approval: `url` is its page at the console's public address
    (`CONSOLE_PUBLIC_URL`), None where the deployment has not set one (absent from older
    consoles)."""

    id: str
    state: ApprovalState
    role: str
    expires_at: str
    permit_id: str | None
    quorum: int
    votes: list[Vote]
    url: NotRequired[str | None]


class Proposal(TypedDict):
    """A proposal: `canonical` is the snapshot's text, exactly what `digest` hashes;
    `approval` is None when the contract needs none; `operation_id` and `operation_state` are
    None until it is dispatched."""

    id: str
    operation: str
    digest: str
    canonical: str
    contract_fingerprint: str
    execution_id: str | None
    approval: ApprovalRef | None
    operation_id: str | None
    operation_state: str | None


class Dispatched(TypedDict):
    """`POST proposals/{id}/dispatch/`: the claim is decided, the handler runs on a worker."""

    operation_id: str
    state: str


class DecisionApproval(TypedDict):
    id: str
    state: ApprovalState


class Decision(TypedDict):
    """`POST approvals/{id}/decision/`."""

    approval: DecisionApproval
    permit_id: str | None


class Attempt(TypedDict):
    number: int
    started_at: str | None
    ended_at: str | None
    outcome: str | None
    error: str | None


class Operation(TypedDict):
    """An operation: its `state` (`exact_console.SETTLED_STATES` once it has settled), its
    attempts, and the handler's `result`."""

    id: str
    proposal_id: str
    state: str
    attempts: list[Attempt]
    result: Any


class AuditEvent(TypedDict):
    id: str
    at: str
    kind: str
    actor: str | None
    operation_id: str | None
    proposal_id: str | None
    digest: str | None
    details: dict[str, Any]


class AuditPage(TypedDict, total=False):
    """`GET audit/`, newest first; `next` links the following page (`next_page`)."""

    results: list[AuditEvent]
    next: str | None
    previous: str | None


class GrantsPage(TypedDict, total=False):
    """`GET grants/`: the caller's grants; `next` links the following page (`next_page`)."""

    results: list[Grant]
    next: str | None
    previous: str | None


class Vote(TypedDict):
    """A grant counted toward an approval's quorum: the approver's name, and when."""

    by: str
    at: str


class ApprovalItem(TypedDict):
    """An approval of `GET approvals/` (docs/rest-api.md#admin): `summary` is the action's
    sentence as the console shows it; decide it with `decide(id, decision=..., digest=digest)`."""

    id: str
    state: ApprovalState
    proposal_id: str
    operation: str
    summary: str
    digest: str
    requested_by: str
    expires_at: str
    quorum: int
    votes: list[Vote]


class Approval(ApprovalItem):
    """`GET approvals/{id}/`: the list's item with the proposal's `canonical` snapshot, exactly
    the bytes `digest` hashes."""

    canonical: str


class ApprovalsPage(TypedDict, total=False):
    """`GET approvals/`, oldest first; `next` links the following page (`next_page`)."""

    results: list[ApprovalItem]
    next: str | None
    previous: str | None


class Grant(TypedDict):
    """A grant (`POST grants/`, the items of `GET grants/`): `subject` is a principal's name."""

    id: str
    issuer: str
    subject: str
    operations: list[str]
    scope: dict[str, Any]
    not_before: str | None
    expires_at: str | None
    revoked_at: str | None
    parent_id: str | None
    budget: int | None


class Webhook(TypedDict):
    """One of the caller's webhooks (`GET webhooks/`, `DELETE webhooks/{id}/`): where its own
    proposals' `events` are delivered, signed in the Standard Webhooks format."""

    id: str
    url: str
    events: list[str]
    created_at: str


class WebhookCreated(Webhook):
    """`POST webhooks/`: the new webhook with its signing `secret` (`whsec_...`), shown this
    once; verify each delivery with it (docs/rest-api.md#webhooks)."""

    secret: str


class WebhooksPage(TypedDict):
    """`GET webhooks/`, oldest first, never a secret."""

    results: list[Webhook]


class Jwk(TypedDict):
    """One public signing key: Ed25519 (`OKP`), for `EdDSA` signatures, named by `kid`."""

    kty: str
    crv: str
    x: str
    kid: str
    use: str
    alg: str


class Jwks(TypedDict):
    """`GET keys/`: the deployment's public signing keys, what `exact_console.permits.verify`
    and an offline `audit_verify --keys` take."""

    keys: list[Jwk]


class AgentCreated(TypedDict):
    """`POST agents/`: the new agent and its bearer token, which is shown this once."""

    id: str
    name: str
    token: str


class AgentToken(TypedDict):
    """`POST agents/{id}/token/`: the agent's new token; the old ones are refused from now on."""

    token: str


class Pause(TypedDict):
    """`POST pauses/`: a pause in force; `operation` and `agent` (a name) are None when it
    covers every contract or every agent."""

    id: str
    scope: str
    operation: str | None
    agent: str | None
    reason: str
    paused_by: str
    paused_at: str
