"""An audit event's details as a person reads them: one labelled field per key, a readable
value for each. Pure: nothing here touches the database.

The details are JSON written by the service that recorded the event (dispatch/services). A key
the console knows reads under its label, in a fixed order (what the event is about first, the
action's binding last); a key it does not know is still shown, under the key itself, after
them: the page never hides a recorded fact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from console.presenters import compact_json

#: Each known key's label, in the order the fields are shown.
LABELS: Mapping[str, str] = {
    "operation": "Operation",
    "code": "Refusal code",
    "outcome": "Outcome",
    "result": "Result",
    "reason": "Reason",
    "error": "Error",
    "evidence": "Evidence",
    "previous": "Previous evidence",
    "sticky": "Uncertainty kept",
    "absence_proven": "Absence proven",
    "attempt": "Attempt",
    "retry_of": "Retry of attempt",
    "refused_attempt": "Refused attempt",
    "authorized_by": "Authorized by",
    "retry_at": "Next retry at",
    "attempt_in_flight": "Attempt in flight",
    "before_claim": "Before the claim",
    "cancelled": "Cancelled",
    "approval_id": "Approval",
    "votes": "Approvals so far",
    "quorum": "Approvals needed",
    "role": "For role",
    "expires_at": "Expires at",
    "permit_id": "Permit",
    "renewal_id": "Renewal",
    "grant_id": "Grant",
    "parent_id": "Delegated from grant",
    "subject": "Granted to",
    "operations": "Operations",
    "scope": "Scope",
    "budget": "Budget",
    "revoked": "Grants revoked",
    "permits_revoked": "Permits revoked",
    "delegation_id": "Delegation",
    "step": "Step",
    "resource_id": "Resource",
    "revision": "Revision",
    "kind": "Kind",
    "id": "Id",
    "state": "State",
    "limit": "Limit",
    "receipt_id": "Receipt",
    "question_id": "Question",
    "question_revision": "Question revision",
    "content_digest": "Content digest",
    "attestation_id": "Attestation",
    "attestation": "Attestation",
    "validator": "Validator",
    "policy": "Policy",
    "report_id": "Report",
    "report_revision": "Report revision",
    "report_digest": "Report digest",
    "findings": "Findings",
    "proposal_id": "Proposal",
    "operation_id": "Operation id",
    "resource_moves": "Resource moves",
    "resources": "Resources",
    "execution_id": "Execution",
    "contract_fingerprint": "Contract fingerprint",
    "policy_fingerprint": "Policy fingerprint",
}

#: Keys whose value is an id, a digest or a fingerprint: shown in a fixed-width font.
MONO = frozenset({
    "approval_id", "permit_id", "renewal_id", "grant_id", "parent_id", "revoked",
    "permits_revoked", "delegation_id", "resource_id", "id", "receipt_id", "question_id",
    "content_digest", "attestation_id", "attestation", "report_id", "report_digest",
    "proposal_id", "operation_id", "resource_moves", "resources", "execution_id",
    "contract_fingerprint", "policy_fingerprint",
})

#: Keys whose value is an ISO 8601 time: shown in local time with UTC beside it.
TIMES = frozenset({"expires_at", "retry_at"})

_ORDER = {key: index for index, key in enumerate(LABELS)}


@dataclass(frozen=True)
class DetailField:
    """One detail of an event: its label, its value as text, and, for a time, the moment."""

    key: str
    label: str
    value: str
    mono: bool = False
    at: datetime | None = None


def detail_fields(details: Any) -> list[DetailField]:
    """Every key of `details` as a labelled field: known keys in `LABELS` order, then unknown
    ones by key, each under its own name. Details that are not an object read as one field."""
    if not isinstance(details, dict):
        return [DetailField(key="", label="Details", value=readable(details))]
    keys = sorted(details, key=lambda key: (_ORDER.get(key, len(_ORDER)), key))
    return [_field(str(key), details[key]) for key in keys]


def _field(key: str, value: Any) -> DetailField:
    at = _moment(value) if key in TIMES else None
    return DetailField(key=key, label=LABELS.get(key, key), value=readable(value),
                       mono=key in MONO, at=at)


def _moment(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def readable(value: Any) -> str:
    """A JSON value in words: `yes`/`no`; `none` for null, an empty text, list or object; a
    list joined by commas; a resource reference as `res_… revision 2 (claim)`; any other
    object as `key: value; …`. Strings keep their text (invisible characters revealed)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return compact_json(value) if value else "none"
    if isinstance(value, list):
        if not value:
            return "none"
        separator = "; " if any(isinstance(item, dict | list) for item in value) else ", "
        return separator.join(readable(item) for item in value)
    if isinstance(value, dict):
        if not value:
            return "none"
        if _is_reference(value):
            move = f" ({readable(value['event'])})" if "event" in value else ""
            return f"{readable(value['id'])} revision {readable(value['revision'])}{move}"
        return "; ".join(f"{key}: {readable(item)}" for key, item in value.items())
    return compact_json(value)


def _is_reference(value: dict[str, Any]) -> bool:
    """A resource reference or move as the audit records it: `{"id", "revision"[, "event"]}`."""
    return {"id", "revision"} <= value.keys() <= {"id", "revision", "event"}


#: Kinds whose words are not their name's (`approval.voted` is one grant toward a quorum).
KIND_TITLES: Mapping[str, str] = {
    "approval.voted": "Approval vote recorded",
    "renewal.voted": "Renewal vote recorded",
}


def kind_title(kind: str) -> str:
    """`grant.issued` as `Grant issued`: the title of a row that names no action."""
    if kind in KIND_TITLES:
        return KIND_TITLES[kind]
    words = kind.replace(".", " ").replace("_", " ").strip()
    return words[:1].upper() + words[1:] if words else "Event"
