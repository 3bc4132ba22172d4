"""The transactional operation store (docs/design.md#outcomes): every model, re-exported from its
module.

`base` holds the core records; `executions`, `delegations`, `evidence`, `notifications` and the
others build on it, each in a module of its job. They import `base` and never this package, so
the package sits above its modules and no import goes round in a circle. Importing it here lets
Django register every model and `from dispatch.models import X` find every model of the store.
"""

from __future__ import annotations

from dispatch.models.base import (
    ApiToken,
    ApprovalRequest,
    Attempt,
    AuditEvent,
    BudgetCounter,
    Decision,
    Grant,
    Lease,
    Operation,
    Permit,
    Principal,
    Proposal,
    ProposalResource,
    Renewal,
    RenewalVote,
    Resource,
    Revision,
    Tenant,
    Vote,
)
from dispatch.models.delegations import Delegation
from dispatch.models.evidence import Attestation, Receipt, ReceiptContent
from dispatch.models.executions import Execution, TranscriptEntry
from dispatch.models.notifications import Notification, NotificationAttempt, WebhookEndpoint
from dispatch.models.pauses import Pause
from dispatch.models.rates import RateWindow
from dispatch.models.scopes import Scope
from dispatch.models.seals import AuditBlock, AuditCheckpoint, AuditHead, AuditSeal
from dispatch.models.waits import WorkflowWait

__all__ = [
    "ApiToken", "ApprovalRequest", "Attempt", "Attestation", "AuditBlock", "AuditCheckpoint",
    "AuditEvent", "AuditHead", "AuditSeal", "BudgetCounter",
    "Decision", "Delegation", "Execution", "Grant", "Lease", "Notification",
    "NotificationAttempt", "Operation", "Pause", "Permit", "Principal", "Proposal",
    "ProposalResource", "RateWindow", "Receipt", "ReceiptContent", "Renewal", "RenewalVote",
    "Resource", "Revision", "Scope", "Tenant",
    "TranscriptEntry", "Vote", "WebhookEndpoint", "WorkflowWait",
]
