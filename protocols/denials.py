"""Denial codes (docs/design.md#denials) and the static diagnostic codes reserved for the checker
(docs/workflows.md#diagnostic-codes).

Every refusal the runtime makes carries one `DenialCode`: a stable string, an HTTP status and a
message that tells the caller what to do next. `Denial` is the one exception type that carries
it; the REST layer turns it into `{"error": {"code", "message", "details"}}` unchanged.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class DenialCode(StrEnum):
    """Runtime denial codes. The value is the wire code; `status` and `remedy` describe it."""

    MALFORMED_REQUEST = "malformed_request"
    UNAUTHENTICATED = "unauthenticated"
    REQUEST_TOO_LARGE = "request_too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    SCHEMA_INVALID = "schema_invalid"
    UNKNOWN_OPERATION = "unknown_operation"
    NOT_FOUND = "not_found"
    CONTRACT_MISMATCH = "contract_mismatch"
    TOOL_NOT_PERMITTED = "tool_not_permitted"
    AUTHORITY_MISSING = "authority_missing"
    AUTHORITY_EXPIRED = "authority_expired"
    AUTHORITY_REVOKED = "authority_revoked"
    SCOPE_VIOLATION = "scope_violation"
    EFFECT_NOT_PERMITTED = "effect_not_permitted"
    PROTOCOL_STATE_INVALID = "protocol_state_invalid"
    STALE_REVISION = "stale_revision"
    APPROVAL_REQUIRED = "approval_required"
    APPROVAL_PENDING = "approval_pending"
    APPROVAL_DENIED = "approval_denied"
    APPROVAL_EXPIRED = "approval_expired"
    APPROVAL_REVOKED = "approval_revoked"
    APPROVAL_DECIDED = "approval_decided"
    PROPOSAL_MISMATCH = "proposal_mismatch"
    PERMIT_CLAIMED = "permit_claimed"
    ROLE_REQUIRED = "role_required"
    DELEGATION_WIDENS = "delegation_widens"
    BUDGET_EXHAUSTED = "budget_exhausted"
    UNSAFE_RETRY = "unsafe_retry"
    PROTECTED_RACE = "protected_race"
    PARALLEL_CAPTURE = "parallel_capture"
    PERSISTENCE_FAILURE = "persistence_failure"
    APPROVER_IS_REQUESTER = "approver_is_requester"
    ATTESTATION_MISSING = "attestation_missing"
    ATTESTATION_FAILED = "attestation_failed"
    ATTESTATION_UNBOUND = "attestation_unbound"
    PAUSED = "paused"
    UNSUPPORTED_STEP = "unsupported_step"
    INPUT_INVALID = "input_invalid"
    EXECUTION_MISMATCH = "execution_mismatch"

    @property
    def status(self) -> int:
        return _TABLE[self][0]

    @property
    def remedy(self) -> str:
        return _TABLE[self][1]


_TABLE: dict[DenialCode, tuple[int, str]] = {
    DenialCode.MALFORMED_REQUEST: (
        400, "The body is not valid JSON (or has duplicate keys, lone surrogates or invalid "
        "UTF-8). Send one well-formed UTF-8 JSON object."),
    DenialCode.UNAUTHENTICATED: (
        401, "Send 'Authorization: Bearer <token>' with a live token, or log in."),
    DenialCode.REQUEST_TOO_LARGE: (413, "The body is over 1 MiB. Send a smaller request."),
    DenialCode.UNSUPPORTED_MEDIA_TYPE: (415, "Send the body as 'Content-Type: application/json'."),
    DenialCode.SCHEMA_INVALID: (
        422, "The arguments do not match the contract's input schema; see details.errors."),
    DenialCode.UNKNOWN_OPERATION: (
        404, "No contract has that qualified name; GET /api/v1/contracts/ lists them."),
    DenialCode.NOT_FOUND: (404, "Nothing with that id is visible to you."),
    DenialCode.CONTRACT_MISMATCH: (
        409, "The contract or handler changed since the proposal was made; propose again."),
    DenialCode.TOOL_NOT_PERMITTED: (
        403, "The operation is not in this agent's tool set; ask an admin to add it."),
    DenialCode.AUTHORITY_MISSING: (
        403, "No grant covers this operation for this principal; ask an admin for a grant."),
    DenialCode.AUTHORITY_EXPIRED: (403, "The grant has expired; ask an admin to issue a new one."),
    DenialCode.AUTHORITY_REVOKED: (403, "The grant was revoked; ask an admin to issue a new one."),
    DenialCode.SCOPE_VIOLATION: (
        403, "The arguments select a resource outside the grant's scope; use an allowed value "
        "or ask for a wider grant."),
    DenialCode.EFFECT_NOT_PERMITTED: (
        403, "The operation's effects exceed what deployment policy allows here."),
    DenialCode.PROTOCOL_STATE_INVALID: (
        409, "The resource is not in a state that allows this step; read it and start from "
        "its current state."),
    DenialCode.STALE_REVISION: (
        409, "The resource has a newer revision; read it and propose against the current one."),
    DenialCode.APPROVAL_REQUIRED: (
        403, "This operation needs a human approval; create a proposal and wait for it."),
    DenialCode.APPROVAL_PENDING: (409, "The approval is still pending; wait for a decision."),
    DenialCode.APPROVAL_DENIED: (403, "A human denied this action; it will not run."),
    DenialCode.APPROVAL_EXPIRED: (
        403, "The approval window has passed; propose again to ask for a new approval."),
    DenialCode.APPROVAL_REVOKED: (403, "The approval was revoked; propose again."),
    DenialCode.APPROVAL_DECIDED: (409, "This approval was already decided; reload to see how."),
    DenialCode.PROPOSAL_MISMATCH: (
        409, "The permit or digest does not belong to this exact proposal; use the proposal's "
        "own permit and the digest it shows."),
    DenialCode.PERMIT_CLAIMED: (
        409, "The permit was already used; each permit runs one action once."),
    DenialCode.ROLE_REQUIRED: (403, "Only a human holding the required role may do this."),
    DenialCode.DELEGATION_WIDENS: (
        403, "A delegated grant may only narrow operations, scope and expiry of its parent."),
    DenialCode.BUDGET_EXHAUSTED: (
        429, "The tool-call or attempt budget is used up; ask an admin or wait for a new "
        "execution."),
    DenialCode.UNSAFE_RETRY: (
        409, "The outcome is uncertain and the operation is not safe to retry; an admin must "
        "resolve it."),
    DenialCode.PROTECTED_RACE: (422, "Protected writes may not run inside a race."),
    DenialCode.PARALLEL_CAPTURE: (
        422, "Two concurrent branches name one handle, proposal, decision or permit; give "
        "each branch its own."),
    DenialCode.PERSISTENCE_FAILURE: (
        503, "The store could not record the step; nothing ran. Try again later."),
    DenialCode.APPROVER_IS_REQUESTER: (
        403, "Nobody decides an approval they requested; another operator must decide it."),
    DenialCode.ATTESTATION_MISSING: (
        403, "No attestation with that id is visible; have the report attested first."),
    DenialCode.ATTESTATION_FAILED: (
        403, "The validator failed this report; mend what its findings say and attest again."),
    DenialCode.ATTESTATION_UNBOUND: (
        409, "The attestation is of another revision, digest or policy; attest the exact "
        "revision you publish."),
    DenialCode.PAUSED: (
        403, "An admin paused this tenant, contract or agent: nothing is claimed or started "
        "until they resume it. Pending approvals stay; dispatch again after the resume."),
    # Refusals of a workflow run before any step (`dispatch.workflows.WorkflowRefused`).
    DenialCode.UNSUPPORTED_STEP: (
        422, "The workflow holds a step kind the runtime does not run yet; rewrite that step."),
    DenialCode.INPUT_INVALID: (
        422, "A workflow input is missing, undeclared or of the wrong kind or state (or an "
        "agent step has no model adapter); pass the inputs the workflow declares."),
    DenialCode.EXECUTION_MISMATCH: (
        409, "The execution ran another workflow, contracts, inputs or sub-agent adapter; "
        "start a new execution or resume with what it started with."),
}

#: The codes only a workflow run's refusal (`dispatch.workflows.WorkflowRefused`) carries: the
#: REST API never answers them, so its documented error bodies leave them out.
WORKFLOW_ONLY: frozenset[DenialCode] = frozenset({
    DenialCode.UNSUPPORTED_STEP, DenialCode.INPUT_INVALID, DenialCode.EXECUTION_MISMATCH})

#: A `schema_invalid` denial lists at most this many errors (docs/design.md#denials).
MAX_ERRORS = 50
#: No text of a denial (its message, any string or key in its details) weighs more than this
#: (`text_weight`), however long the value a request quoted (an id naming nothing is echoed).
MAX_TEXT = 4096
#: ... and no pointer or message of a `schema_invalid` error more than this: fifty of them stay
#: well inside the 64 KiB an error body may take.
MAX_ERROR_TEXT = 512
ELLIPSIS = "…"


def text_weight(text: str) -> int:
    """At most the bytes `text` takes as a JSON string under any encoder: a printable ASCII
    character is itself (`"` and `\\` escaped, two), any other may be a `\\uXXXX` escape (two
    of them beyond the BMP)."""
    return sum(_weight(char) for char in text)


def _weight(char: str) -> int:
    point = ord(char)
    if 0x20 <= point < 0x7F:
        return 2 if char in '"\\' else 1
    return 12 if point > 0xFFFF else 6


def shorten(text: str, limit: int = MAX_TEXT) -> str:
    """`text` if it weighs at most `limit`, else its longest start that does with `ELLIPSIS`
    after it: a cut text says so."""
    if len(text) * 12 <= limit or text_weight(text) <= limit:
        return text
    room, end = limit - _weight(ELLIPSIS), 0
    for char in text:
        room -= _weight(char)
        if room < 0:
            break
        end += 1
    return text[:end] + ELLIPSIS


def _bounded(value: Any) -> Any:
    """`value` with every string and key shortened (`shorten`); anything else as it is."""
    if isinstance(value, str):
        return shorten(value)
    if isinstance(value, dict):
        return {shorten(k) if isinstance(k, str) else k: _bounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_bounded(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_bounded(v) for v in value)
    return value


def _short_error(error: Any) -> Any:
    if not isinstance(error, dict):
        return error
    return {k: shorten(v, MAX_ERROR_TEXT) if isinstance(v, str) else v for k, v in error.items()}


class Denial(Exception):
    """A refusal with a stable code, the remedy as message, and structured details.

    A `schema_invalid` denial keeps the first `MAX_ERRORS` of its `errors` and says how many
    there were in `error_count`, wherever it was raised: a body of a million unknown members
    answers (and audits) fifty, each pointer and message shortened to `MAX_ERROR_TEXT`. Every
    other text it holds is shortened to `MAX_TEXT`: a value a request quoted (a 100 KB member
    name in a pointer, an id) is never echoed whole.
    """

    def __init__(
        self, code: DenialCode, message: str | None = None, **details: Any
    ) -> None:
        self.code = code
        self.message = shorten(message or code.remedy)
        errors = details.get("errors")
        if code is DenialCode.SCHEMA_INVALID and isinstance(errors, list):
            details["errors"] = [_short_error(e) for e in errors[:MAX_ERRORS]]
            details["error_count"] = len(errors)
        self.details: dict[str, Any] = _bounded(details)
        super().__init__(f"{code.value}: {self.message}")

    @property
    def status(self) -> int:
        return self.code.status

    def as_body(self) -> dict[str, Any]:
        return {"error": {"code": self.code.value, "message": self.message,
                          "details": self.details}}


class DiagnosticCode(StrEnum):
    """Static diagnostic codes reserved for the workflow checker
    (docs/workflows.md#diagnostic-codes)."""

    MISSING_AUTHORITY = "AGL-E001"
    INVALID_PROTOCOL_STATE = "AGL-E002"
    CONSUMED_PERMIT = "AGL-E003"
    INCOMPATIBLE_BRANCH_OWNERSHIP = "AGL-E004"
    UNBOUND_APPROVAL = "AGL-E005"
    UNSAFE_RETRY = "AGL-E006"
    PROTECTED_RACE = "AGL-E007"
    # The workflow checker's own codes; the seven above keep their numbers.
    EFFECT_CEILING_EXCEEDED = "AGL-E008"
    UNKNOWN_OPERATION = "AGL-E009"
    NON_EXHAUSTIVE_MATCH = "AGL-E010"
    LOOP_INVARIANT = "AGL-E011"
    PARALLEL_CAPTURE = "AGL-E012"
    FORGED_VALUE = "AGL-E013"
    UNDEFINED_NAME = "AGL-E014"
    TYPE_MISMATCH = "AGL-E015"
    INVALID_ARGUMENTS = "AGL-E016"
    MALFORMED_WORKFLOW = "AGL-E017"
    # The evidence chain's codes (docs/design.md#evidence); the seventeen above keep their
    # numbers.
    UNATTESTED_PUBLICATION = "AGL-E018"
    UNBOUND_ATTESTATION = "AGL-E019"
    FOREIGN_RECEIPT = "AGL-E020"
