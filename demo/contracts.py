"""The demo contracts of docs/design.md#demo and the resource kind they act on (`email_draft`).

Contracts are trusted declarations; each names its handler's implementation fingerprint, so a
changed handler changes the contract fingerprint and old proposals refuse to dispatch.
Django-free: the workflow tools and tests build registries from these factories.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from demo.tables import EMAIL_DRAFT, QUESTION, REPORT
from protocols.contracts import (
    ApprovalRequirement,
    AttestationRequirement,
    AuthorityRequirement,
    ContractRegistry,
    Effect,
    EvidenceRole,
    Idempotency,
    OperationContract,
    Reconciliation,
    ResourceKind,
    SchedulingContract,
)

# One plain address per field (protocols.addresses): no display name, no line break, no
# invisible character; an internationalized domain is shown to the operator in both forms.
ADDRESS: Mapping[str, Any] = {"type": "string", "format": "mailbox", "maxLength": 254}
# A header line: no control character but the tab (RFC 5322 §2.2, §3.2.5), so a subject cannot
# add a header or end early; `$` is the end of the text (protocols.patterns).
HEADER_TEXT: Mapping[str, Any] = {
    "type": "string", "maxLength": 998,
    "pattern": "^[^\\u0000-\\u0008\\u000A-\\u001F\\u007F-\\u009F]*$",
}


EMAIL_DRAFT_KIND = ResourceKind(
    name="email_draft",
    protocol=EMAIL_DRAFT,
    payload_schema={
        "type": "object",
        "additionalProperties": False,
        "required": ["from", "to", "subject", "body"],
        "properties": {
            "from": ADDRESS,
            "to": {"type": "array", "minItems": 1, "maxItems": 100, "items": ADDRESS},
            "cc": {"type": "array", "maxItems": 100, "items": ADDRESS, "default": []},
            "subject": HEADER_TEXT,
            "body": {"type": "string", "maxLength": 200_000},
        },
    },
)

# The evidence chain (docs/design.md#evidence): what is researched, and what is published. A
# report's citations name receipts (`evr_…`), which only the dispatcher issues; the schema checks
# their shape.
QUESTION_KIND = ResourceKind(
    name="question",
    protocol=QUESTION,
    payload_schema={
        "type": "object",
        "additionalProperties": False,
        "required": ["topic", "text"],
        "properties": {
            "topic": {"type": "string", "minLength": 1, "maxLength": 100,
                      "pattern": "^[a-z0-9][a-z0-9-]*$"},
            "text": {"type": "string", "minLength": 1, "maxLength": 2000},
        },
    },
)

REPORT_KIND = ResourceKind(
    name="report",
    protocol=REPORT,
    payload_schema={
        "type": "object",
        "additionalProperties": False,
        "required": ["question", "title", "body", "citations"],
        "properties": {
            "question": {"type": "string", "minLength": 1, "maxLength": 40},
            "title": HEADER_TEXT,
            "body": {"type": "string", "maxLength": 200_000},
            "citations": {
                "type": "array", "maxItems": 100,
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["receipt", "quote"],
                    "properties": {
                        "receipt": {"type": "string", "pattern": "^evr_[A-Za-z0-9]{1,36}$"},
                        "quote": {"type": "string", "minLength": 1, "maxLength": 2000},
                    },
                },
            },
        },
    },
    # The report's topic (its authority key) is its question's: resolved through the store.
    links={"question": "question"},
)

RESOURCE_KINDS = (EMAIL_DRAFT_KIND, QUESTION_KIND, REPORT_KIND)

RESOURCE_REF: Mapping[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["id", "revision"],
    "properties": {
        # Any string: one naming nothing is not_found (docs/design.md#which-code).
        "id": {"type": "string"},
        "revision": {"type": "integer", "minimum": 1},
    },
}

OUTCOME_STATES = {"completed": "sent", "failed_no_effect": "failed_no_effect",
                  "unknown": "unknown"}
#: What a publication's outcome leaves its report in.
PUBLICATION_STATES = {"completed": "published", "failed_no_effect": "failed_no_effect",
                      "unknown": "unknown"}


def email_send(implementation_fingerprint: str) -> OperationContract:
    return OperationContract(
        qualified_name="email.send",
        contract_version=1,
        implementation_fingerprint=implementation_fingerprint,
        input_type={
            "type": "object",
            "additionalProperties": False,
            "required": ["draft"],
            "properties": {"draft": RESOURCE_REF},
        },
        output_type={"type": "object", "properties": {"message_id": {"type": "string"}}},
        authority_requirements=(AuthorityRequirement("mailbox", "/draft/payload/from"),),
        possible_effects=frozenset({Effect.EXTERNAL_WRITE}),
        protocol_preconditions={"draft": "email_draft"},
        protocol_outcomes=OUTCOME_STATES,
        approval_requirement=ApprovalRequirement(role="operator", expires_in=3600),
        idempotency_contract=Idempotency.NONE,
        scheduling_contract=SchedulingContract(timeout=15.0, max_attempts=1, budget_cost=1),
        destination="smtp_sink",
        reconciliation=Reconciliation.PRESENCE,
    )


def payments_transfer(implementation_fingerprint: str) -> OperationContract:
    account = {"type": "string", "pattern": "^[A-Za-z0-9-]{1,34}$"}
    return OperationContract(
        qualified_name="payments.transfer",
        contract_version=1,
        implementation_fingerprint=implementation_fingerprint,
        input_type={
            "type": "object",
            "additionalProperties": False,
            "required": ["from_account", "to_account", "amount", "currency"],
            "properties": {
                "from_account": account,
                "to_account": account,
                "amount": {"type": "string", "maxLength": 32},
                "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "memo": {"type": "string", "maxLength": 140, "default": ""},
            },
        },
        output_type={"type": "object"},
        authority_requirements=(AuthorityRequirement("account", "/from_account"),),
        possible_effects=frozenset({Effect.EXTERNAL_WRITE, Effect.FINANCIAL_WRITE}),
        approval_requirement=ApprovalRequirement(role="operator", expires_in=3600),
        idempotency_contract=Idempotency.RECEIVER_DEDUP,
        scheduling_contract=SchedulingContract(timeout=15.0, max_attempts=3, budget_cost=1),
        destination="bank",
        reconciliation=Reconciliation.PRESENCE_AND_ABSENCE,
        normalizers={"amount": "decimal_amount"},
    )


def crm_lookup(implementation_fingerprint: str) -> OperationContract:
    return OperationContract(
        qualified_name="crm.lookup",
        contract_version=1,
        implementation_fingerprint=implementation_fingerprint,
        input_type={
            "type": "object",
            "additionalProperties": False,
            "required": ["customer_id"],
            "properties": {"customer_id": {"type": "string", "minLength": 1, "maxLength": 64}},
        },
        output_type={"type": "object"},
        authority_requirements=(AuthorityRequirement("customer", "/customer_id"),),
        possible_effects=frozenset({Effect.READ}),
        idempotency_contract=Idempotency.IDEMPOTENT,
        scheduling_contract=SchedulingContract(timeout=15.0, max_attempts=3, budget_cost=1),
        destination="crm",
        reconciliation=Reconciliation.NONE,
    )


# The evidence chain's contracts (docs/design.md#evidence). Every one has the authority key
# `topic`: a question's own, a report's through the question it names.
QUESTION_TOPIC = AuthorityRequirement("topic", "/question/payload/topic")
REPORT_TOPIC = AuthorityRequirement("topic", "/report/links/question/payload/topic")
#: The policy a publication's attestation must have been judged under.
PUBLICATION_POLICY = "cited-sources/1"


def research_fetch(implementation_fingerprint: str) -> OperationContract:
    """Retrieve one allow-listed source for a question; the dispatcher issues the receipt."""
    return OperationContract(
        qualified_name="research.fetch",
        contract_version=1,
        implementation_fingerprint=implementation_fingerprint,
        input_type={
            "type": "object",
            "additionalProperties": False,
            "required": ["question", "source"],
            "properties": {
                "question": RESOURCE_REF,
                "source": {"type": "string", "minLength": 1, "maxLength": 2000,
                           "pattern": "^https?://[^\\s]+$"},
            },
        },
        output_type={
            "type": "object",
            "additionalProperties": False,
            "required": ["content"],
            "properties": {"content": {"type": "string"}},
        },
        authority_requirements=(QUESTION_TOPIC,),
        possible_effects=frozenset({Effect.READ}),
        protocol_preconditions={"question": "question"},
        idempotency_contract=Idempotency.IDEMPOTENT,
        scheduling_contract=SchedulingContract(timeout=15.0, max_attempts=3, budget_cost=1),
        destination="sources",
        reconciliation=Reconciliation.NONE,
        # A fetch neither moves nor blocks its question: an edit of the question's wording
        # while a fetch runs leaves the fetch's outcome to be recorded (the receipt names the
        # revision it was retrieved for).
        reads=frozenset({"question"}),
        evidence=EvidenceRole.RECEIPT,
        # Concurrent branches may fetch sources for one question (the shareable read
        # grant, docs/workflows.md#typing-rules): a fetch is a pure read of it.
        shareable=True,
    )


def evidence_attest(implementation_fingerprint: str) -> OperationContract:
    """Have the validator serving `policy` judge one report revision against its receipts."""
    return OperationContract(
        qualified_name="evidence.attest",
        contract_version=1,
        implementation_fingerprint=implementation_fingerprint,
        input_type={
            "type": "object",
            "additionalProperties": False,
            "required": ["report"],
            "properties": {
                "report": RESOURCE_REF,
                "policy": {"type": "string", "maxLength": 100,
                           "pattern": "^[a-z][a-z0-9-]*/[1-9][0-9]*$",
                           "default": PUBLICATION_POLICY},
            },
        },
        output_type={
            "type": "object",
            "additionalProperties": False,
            "required": ["validator", "policy", "evidence", "result", "findings"],
            "properties": {
                "validator": {"type": "string"},
                "policy": {"type": "string"},
                "evidence": {"type": "array", "items": {"type": "string"}},
                "result": {"enum": ["pass", "fail"]},
                "findings": {"type": "array", "items": {
                    "type": "object", "required": ["citation", "message"],
                    "properties": {"citation": {"type": ["integer", "null"]},
                                   "message": {"type": "string"}}}},
            },
        },
        authority_requirements=(REPORT_TOPIC,),
        possible_effects=frozenset({Effect.READ}),
        protocol_preconditions={"report": "report"},
        idempotency_contract=Idempotency.IDEMPOTENT,
        scheduling_contract=SchedulingContract(timeout=15.0, max_attempts=1, budget_cost=1),
        destination="validator",
        reconciliation=Reconciliation.NONE,
        reads=frozenset({"report"}),
        evidence=EvidenceRole.ATTESTATION,
    )


def report_publish(implementation_fingerprint: str) -> OperationContract:
    """Publish the exact attested report revision; the publisher deduplicates on the key."""
    return OperationContract(
        qualified_name="report.publish",
        contract_version=1,
        implementation_fingerprint=implementation_fingerprint,
        input_type={
            "type": "object",
            "additionalProperties": False,
            "required": ["report", "attestation"],
            "properties": {
                "report": RESOURCE_REF,
                # any string: one naming no attestation is attestation_missing
                # (docs/design.md#evidence)
                "attestation": {"type": "string"},
            },
        },
        output_type={"type": "object"},
        authority_requirements=(REPORT_TOPIC,),
        possible_effects=frozenset({Effect.EXTERNAL_WRITE}),
        protocol_preconditions={"report": "report"},
        protocol_outcomes=PUBLICATION_STATES,
        approval_requirement=ApprovalRequirement(role="operator", expires_in=3600),
        idempotency_contract=Idempotency.RECEIVER_DEDUP,
        scheduling_contract=SchedulingContract(timeout=15.0, max_attempts=3, budget_cost=1),
        destination="publisher",
        reconciliation=Reconciliation.PRESENCE_AND_ABSENCE,
        evidence=EvidenceRole.PUBLICATION,
        attestation=AttestationRequirement(argument="attestation", report="report",
                                           policy=PUBLICATION_POLICY),
    )


# Each demo contract by name: a factory taking its handler's implementation fingerprint.
CONTRACTS: Mapping[str, Callable[[str], OperationContract]] = {
    "email.send": email_send,
    "payments.transfer": payments_transfer,
    "crm.lookup": crm_lookup,
    "research.fetch": research_fetch,
    "evidence.attest": evidence_attest,
    "report.publish": report_publish,
}


def build_registry(fingerprints: Mapping[str, str]) -> ContractRegistry:
    """A registry of the demo contracts named in `fingerprints`, each under its
    implementation fingerprint there."""
    registry = ContractRegistry()
    for name, factory in CONTRACTS.items():
        if name in fingerprints:
            registry.register(factory(fingerprints[name]))
    return registry
