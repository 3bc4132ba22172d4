"""Read-only queries of the evidence chain for the console (docs/design.md#evidence): what a
publication's approval rests on, and a question's chain from its revisions to its publications
as one timeline.

Every query is scoped by the viewer's tenant and bounded; nothing counts a table. An id a
report cites that names no receipt of the tenant is shown as such, never an error: the page
must say what is missing, and the validator's findings say the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q

from dispatch.models import (
    Attestation,
    Principal,
    Proposal,
    ProposalResource,
    Receipt,
    Resource,
    Revision,
)
from dispatch.runtime import get_runtime
from dispatch.services.access import access_question_for_review
from dispatch.services.evidence import attestation_refusal
from protocols.contracts import EvidenceRole, OperationContract
from protocols.denials import Denial
from protocols.jsontypes import JSONObject, JSONValue

#: A chain shows at most this many records of each kind (a question has a handful).
CHAIN_LIMIT = 200


# --- a publication's approval -------------------------------------------------------------


@dataclass(frozen=True)
class CitedReceipt:
    """One citation of the report beside the receipt it names (None: no such receipt in the
    viewer's tenant), with the attestation's findings on it."""

    number: int  # 1-based, as the validator's messages count citations
    receipt_id: str
    quote: str
    receipt: Receipt | None
    findings: tuple[str, ...]
    other_question: bool  # the receipt was issued for another question than the report's


@dataclass(frozen=True)
class PublicationEvidence:
    """What a publication's approval rests on: the exact report revision the snapshot binds,
    each citation with its receipt, the named attestation, and what a grant would meet on it
    now (`attestation_refusal`, the rule admission runs; None when it would pass)."""

    report_id: str
    report_revision: int
    report_digest: str
    title: str
    body: str
    question_id: str
    question: JSONObject | None  # the question's revision as the snapshot resolved it
    citations: list[CitedReceipt]
    attestation_id: str
    attestation: Attestation | None
    policy: str  # the policy the contract requires
    refusal: Denial | None


def publication_evidence(
    *, viewer: Principal, proposal: Proposal, contract: OperationContract | None,
    arguments: JSONObject,
) -> PublicationEvidence | None:
    """For a proposal whose contract rests on an attestation (`report.publish`): the evidence
    of its snapshot's `arguments`, in two queries (receipts, attestation) plus admission's own
    look-up of the attestation. None for any other proposal."""
    if contract is None or contract.attestation is None:
        return None
    need = contract.attestation
    report = arguments.get(need.report)
    if not isinstance(report, dict):
        return None
    payload = report.get("payload")
    if not isinstance(payload, dict):
        payload = {}
    cited = [c for c in payload.get("citations", []) if isinstance(c, dict)]
    receipts = {r.id: r for r in Receipt.objects.filter(
        tenant_id=viewer.tenant_id,
        id__in=[c["receipt"] for c in cited if isinstance(c.get("receipt"), str)])}
    attestation_id = _text(arguments.get(need.argument))
    attestation = Attestation.objects.filter(id=attestation_id,
                                             tenant_id=viewer.tenant_id).first()
    findings = _findings_by_citation(attestation, len(cited))
    question_id = _text(payload.get("question"))
    links = report.get("links")
    question = links.get("question") if isinstance(links, dict) else None
    citations = []
    for index, citation in enumerate(cited):
        receipt = receipts.get(_text(citation.get("receipt")))
        citations.append(CitedReceipt(
            number=index + 1, receipt_id=_text(citation.get("receipt")),
            quote=_text(citation.get("quote")), receipt=receipt,
            findings=tuple(findings.get(index, ())),
            other_question=receipt is not None and receipt.question_id != question_id))
    return PublicationEvidence(
        report_id=_text(report.get("id")), report_revision=int(report.get("revision", 0)),
        report_digest=_text(report.get("digest")), title=_text(payload.get("title")),
        body=_text(payload.get("body")), question_id=question_id,
        question=question if isinstance(question, dict) else None, citations=citations,
        attestation_id=attestation_id, attestation=attestation,
        policy=need.policy,
        refusal=attestation_refusal(contract, proposal.principal, arguments, arguments))


def _findings_by_citation(
    attestation: Attestation | None, count: int,
) -> dict[int | None, list[str]]:
    """The attestation's findings keyed by the 0-based citation they name; one that names no
    citation of this report is about the report as a whole (None)."""
    found: dict[int | None, list[str]] = {}
    for finding in attestation.findings if attestation is not None else []:
        if not isinstance(finding, dict):
            continue
        index = finding.get("citation")
        key = index if isinstance(index, int) and 0 <= index < count else None
        found.setdefault(key, []).append(_text(finding.get("message")))
    return found


def _text(value: JSONValue) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


# --- a question's evidence chain ----------------------------------------------------------


@dataclass(frozen=True)
class ChainEvent:
    """One step of the chain, at the time the store recorded it. `kind` is one of
    `question.revised`, `receipt.issued`, `report.revised`, `attestation.issued`,
    `publication.proposed`, `publication.dispatched`; `record` is the row it shows."""

    at: datetime
    kind: str
    record: Any


@dataclass(frozen=True)
class EvidenceChain:
    question: Resource
    revision: Revision | None  # the current one
    reports: list[Resource]
    events: list[ChainEvent]  # oldest first
    # Some kind of record reached `limit`: only the newest `limit` of each kind are shown.
    truncated: bool = False
    limit: int = 0


# Same-instant events read in the order the chain is built.
_KIND_ORDER = {kind: i for i, kind in enumerate((
    "question.revised", "receipt.issued", "report.revised", "attestation.issued",
    "publication.proposed", "publication.dispatched"))}


def question_evidence_chain(*, viewer: Principal, question_id: object) -> EvidenceChain:
    """A question of the viewer's tenant and everything that rests on it, as a timeline:
    its revisions, its receipts, the report revisions naming it, their attestations, and the
    publications of those reports with their approvals and operations: of each kind the newest
    `CHAIN_LIMIT` (the current revision is always among them). Six bounded queries;
    `not_found` for another tenant's id, a missing one, or a resource of another kind."""
    question = access_question_for_review(viewer, question_id)
    revisions = list(Revision.objects.filter(resource_id=question.id).select_related(
        "created_by").order_by("-number")[:CHAIN_LIMIT])[::-1]
    receipts = list(Receipt.objects.filter(
        tenant_id=viewer.tenant_id, question_id=question.id,
    ).order_by("-retrieved_at", "-id")[:CHAIN_LIMIT])[::-1]
    report_revisions = _report_revisions(viewer, question.id)
    report_ids = sorted({r.resource_id for r in report_revisions})
    attestations = list(Attestation.objects.filter(
        tenant_id=viewer.tenant_id, report_id__in=report_ids,
    ).order_by("-issued_at", "-id")[:CHAIN_LIMIT])[::-1] if report_ids else []
    publications = _publications(viewer, report_ids)
    events = [ChainEvent(r.created_at, "question.revised", r) for r in revisions]
    events += [ChainEvent(r.retrieved_at, "receipt.issued", r) for r in receipts]
    events += [ChainEvent(r.created_at, "report.revised", r) for r in report_revisions]
    events += [ChainEvent(a.issued_at, "attestation.issued", a) for a in attestations]
    for proposal in publications:
        events.append(ChainEvent(proposal.created_at, "publication.proposed", proposal))
        operation = getattr(proposal, "operation_record", None)
        if operation is not None:
            events.append(ChainEvent(operation.claimed_at, "publication.dispatched", operation))
    events.sort(key=lambda e: (e.at, _KIND_ORDER[e.kind]))
    reports: dict[str, Resource] = {}
    for revision in report_revisions:
        reports.setdefault(revision.resource_id, revision.resource)
    current = next((r for r in revisions if r.number == question.current_revision), None)
    truncated = any(len(found) >= CHAIN_LIMIT for found in (
        revisions, receipts, report_revisions, attestations, publications))
    return EvidenceChain(question=question, revision=current, reports=list(reports.values()),
                         events=events, truncated=truncated, limit=CHAIN_LIMIT)


def _report_revisions(viewer: Principal, question_id: str) -> list[Revision]:
    """Revisions of the tenant's resources whose payload links to this question (a report's
    `question` member: the links the registered resource kinds declare)."""
    links = Q()
    for kind in get_runtime().resource_kinds.values():
        for member, linked_kind in kind.links.items():
            if linked_kind == "question":
                links |= Q(resource__kind=kind.name, **{f"payload__{member}": question_id})
    if not links:
        return []
    return list(Revision.objects.filter(links, resource__tenant_id=viewer.tenant_id)
                .select_related("resource").order_by("-created_at", "-id")[:CHAIN_LIMIT])[::-1]


def _publications(viewer: Principal, report_ids: list[str]) -> list[Proposal]:
    """Proposals of a publishing contract over these reports, with approval and operation."""
    names = sorted({c.qualified_name for c in get_runtime().registry
                    if c.evidence is EvidenceRole.PUBLICATION})
    if not report_ids or not names:
        return []
    touching = ProposalResource.objects.filter(resource_id__in=report_ids).values("proposal_id")
    return list(Proposal.objects.filter(
        tenant_id=viewer.tenant_id, operation__in=names, id__in=touching,
    ).select_related("approval", "operation_record").order_by(
        "-created_at", "-id")[:CHAIN_LIMIT])[::-1]
