"""Evidence receipts and attestations (DESIGN §11, spec §11): issued by trusted code only.

A receipt or an attestation is written by the `evidence_plan` that the one owner of an
operation's state (`dispatch.services.operations.operation_move`) asks for, inside the
transaction that records the operation's completion: so no API, model output or
agent-supplied JSON can create one, and an outcome that is not recorded issues none.
Admission asks
`attestation_refusal` whether a publication rests on a passing attestation of the exact report
revision (before the report's state, so the code names the attestation), and
`evidence_refusal` whether a fetched source is on the deployment's allow-list and a policy
has a validator.

The validator runs on the worker, inside `evidence.attest`'s handler (`attestation_judge`):
it sees the report revision the snapshot bound, the receipts of the report's tenant that the
report cites, and, for each, the bytes its source serves now, read through the handler; so a
source whose bytes changed since its receipt fails the citation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from dispatch.handlers import DefiniteFailure, HandlerContext, UncertainOutcome, within_deadline
from dispatch.ids import new_id
from dispatch.models import (
    Attestation,
    Operation,
    Principal,
    Receipt,
    ReceiptContent,
    Resource,
)
from dispatch.runtime import get_runtime
from dispatch.services.audit import audit_moves, audit_record
from dispatch.services.resources import resource_move
from protocols.canonical import digest_bytes
from protocols.contracts import EvidenceRole, OperationContract
from protocols.denials import Denial, DenialCode
from protocols.evidence import Citation, Judgement, ReceiptView, ReportView
from protocols.lifecycle import OperationState, ResourceEvent
from protocols.sources import source_allowed, source_problem
from protocols.trace import ATTESTATION_ISSUED, QUESTION_ANSWERED, RECEIPT_ISSUED

#: The operation states whose recording issues the contract's evidence record: a publication
#: that reconciliation establishes answers its question as one that completed does.
_ISSUING_STATES = frozenset({OperationState.COMPLETED, OperationState.RECONCILED_COMPLETED})


def _utc(at: datetime) -> str:
    """ISO 8601 with `Z`, as the API's serializers write a UTC time."""
    return at.isoformat().replace("+00:00", "Z")


def receipt_json(receipt: Receipt) -> dict[str, Any]:
    """A receipt as the API and a fetch's result show it (DESIGN §11)."""
    return {"id": receipt.id,
            "question": {"id": receipt.question_id, "revision": receipt.question_revision},
            "source": receipt.source, "content_digest": receipt.content_digest,
            "retrieved_at": _utc(receipt.retrieved_at),
            "operation_id": receipt.operation_id}


def attestation_json(attestation: Attestation) -> dict[str, Any]:
    """An attestation as the API and an attest's result show it (DESIGN §11)."""
    return {"id": attestation.id, "validator": attestation.validator,
            "policy": attestation.policy,
            "report": {"id": attestation.report_id, "revision": attestation.report_revision,
                       "digest": attestation.report_digest},
            "evidence": list(attestation.evidence), "result": attestation.result,
            "findings": list(attestation.findings),
            "issued_at": _utc(attestation.issued_at)}


# --- admission ----------------------------------------------------------------------------

def evidence_refusal(contract: OperationContract, arguments: dict[str, Any]) -> Denial | None:
    """What an evidence operation is refused before it is proposed or run: a fetch of a
    source off the deployment's allow-list (`EVIDENCE_SOURCE_ALLOWLIST`, URL prefixes matched
    by scheme, host, port and whole path segments: `protocols.sources`) is
    `effect_not_permitted` (the deployment does not permit reading it); an attest under a
    policy no registered validator serves is `schema_invalid` at `/arguments/policy`."""
    if contract.evidence is EvidenceRole.RECEIPT:
        source = str(arguments.get("source"))
        allowed = source_allowlist()
        if source_allowed(source, allowed):
            return None
        problem = source_problem(source)
        return Denial(DenialCode.EFFECT_NOT_PERMITTED,
                      "The source is not on this deployment's source allow-list; fetch one "
                      "of the allowed sources.",
                      reason=f"never a source: {problem}" if problem
                      else "source not on the allow-list", allowed=allowed)
    if contract.evidence is EvidenceRole.ATTESTATION:
        validators = get_runtime().validators
        if validators.for_policy(str(arguments.get("policy"))) is None:
            served = sorted({spec.policy for spec in validators})
            return Denial(DenialCode.SCHEMA_INVALID, errors=[{
                "pointer": "/arguments/policy",
                "message": f"no validator serves this policy; served: {served}"}])
    return None


def source_allowlist() -> list[str]:
    """The URL prefixes a `research.fetch` may read: the setting, else the demo's sources."""
    configured = list(settings.EVIDENCE_SOURCE_ALLOWLIST)
    return configured or [str(settings.DESTINATIONS["sources_url"]).rstrip("/") + "/"]


def attestation_refusal(
    contract: OperationContract, principal: Principal, arguments: dict[str, Any],
    resolved: dict[str, Any],
) -> Denial | None:
    """DESIGN §11, in order: no such attestation visible to the principal's tenant is
    `attestation_missing`; a `fail` is `attestation_failed`; one of another report, revision or
    digest, or judged under another policy than the contract requires, is
    `attestation_unbound`. None when the publication rests on what it must."""
    need = contract.attestation
    if need is None:
        return None
    attestation_id = arguments[need.argument]
    found = Attestation.objects.filter(id=attestation_id, tenant_id=principal.tenant_id).first() \
        if isinstance(attestation_id, str) else None
    if found is None:
        return Denial(DenialCode.ATTESTATION_MISSING, attestation=str(attestation_id)[:80])
    if found.result != Attestation.Result.PASS:
        return Denial(DenialCode.ATTESTATION_FAILED, attestation=found.id,
                      findings=len(found.findings))
    report = resolved[need.report]
    bound = {"report": (found.report_id, report["id"]),
             "revision": (found.report_revision, report["revision"]),
             "digest": (found.report_digest, report["digest"]),
             "policy": (found.policy, need.policy)}
    for what, (theirs, ours) in bound.items():
        if theirs != ours:
            return Denial(DenialCode.ATTESTATION_UNBOUND, attestation=found.id, field=what,
                          attested=theirs, required=ours)
    return None


# --- the validator, on the worker -----------------------------------------------------------

SourceReader = Callable[[str], bytes]


def attestation_judge(ctx: HandlerContext, read_source: SourceReader) -> dict[str, Any]:
    """Run the validator serving the snapshot's `policy` on the snapshot's report revision:
    the handler's result, which `evidence_plan` turns into the attestation.

    `read_source(url)` returns the bytes a receipt's source serves now (raising
    `DefiniteFailure` when it cannot); a source it cannot read counts as holding no bytes, a
    finding of its citation. Only sources of receipts issued for the report's question are
    read, all of them before the validator runs and within the contract's deadline: past it,
    nothing is judged (`DefiniteFailure`, a read has no effect). A policy no registered
    validator serves is `DefiniteFailure` too.
    """
    arguments = ctx.arguments
    policy = str(arguments["policy"])
    spec = get_runtime().validators.for_policy(policy)
    if spec is None:
        raise DefiniteFailure(f"no validator serves policy {policy}; nothing was judged")
    report = _report_view(arguments["report"])
    principal = Principal.objects.only("tenant_id").get(id=ctx.principal_id)
    receipts = {r.id: ReceiptView(id=r.id, question_id=r.question_id,
                                  question_revision=r.question_revision, source=r.source,
                                  content_digest=r.content_digest)
                for r in Receipt.objects.filter(tenant_id=principal.tenant_id,
                                                id__in=list(report.cited_receipts))}
    wanted = {rid: r.source for rid, r in receipts.items() if r.question_id == report.question_id}

    def read_all() -> dict[str, bytes | None]:
        found: dict[str, bytes | None] = {}
        for rid, url in sorted(wanted.items()):
            try:
                found[rid] = read_source(url)
            except DefiniteFailure:
                found[rid] = None
        return found

    try:
        read = within_deadline(ctx, read_all)
    except UncertainOutcome:
        raise DefiniteFailure(f"the cited sources could not be read within the contract "
                              f"timeout of {ctx.timeout:g}s; nothing was judged") from None
    judgement: Judgement = spec.fn(report, receipts, read.get)
    return {"validator": spec.validator_label, "policy": spec.policy,
            "evidence": list(report.cited_receipts), "result": judgement.result,
            "findings": [f.as_json() for f in judgement.findings]}


def _report_view(ref: dict[str, Any]) -> ReportView:
    payload = ref["payload"]
    return ReportView(
        id=ref["id"], revision=ref["revision"], digest=ref["digest"],
        question_id=str(payload["question"]), title=str(payload["title"]),
        body=str(payload["body"]),
        citations=tuple(Citation(receipt=str(c["receipt"]), quote=str(c["quote"]))
                        for c in payload["citations"]))


# --- issuance, inside the outcome's transaction ---------------------------------------------

@dataclass(frozen=True)
class Issuance:
    """The evidence record an outcome issues: `result` is what the operation keeps (the
    handler's answer with the record in it), `write` writes the record and its audit event,
    inside the transaction that moves the operation and only once that move has held."""

    result: dict[str, Any] | None
    write: Callable[[], None]


def evidence_plan(
    *, operation: Operation, target: OperationState, result: dict[str, Any] | None,
    now: datetime,
) -> Issuance | None:
    """The record the operation's contract has the dispatcher issue when it moves to
    `target` (DESIGN §11), or None:

    - `receipt`: over the exact bytes of the handler's `content` (strict UTF-8, so the text
      encodes back to the bytes retrieved), for the question revision the snapshot bound;
    - `attestation`: the handler's judgement, bound to the report revision the snapshot bound
      (never to anything the handler says of it); a `pass` moves that revision to `attested`
      when it is still the current draft;
    - `publication`: the report's question is answered, once.

    Only a completion (or a reconciled one, for a publication) issues. Ids and times are
    chosen here, so the result the operation keeps already names the record.
    """
    if target not in _ISSUING_STATES:
        return None
    # The contract the proposal was made under; after an upgrade, the newest of its name (an
    # admin's resolve of an old publication still answers its question).
    try:
        contract = get_runtime().contract_for(operation.operation, operation.contract_fingerprint)
    except Denial:
        return None
    role = contract.evidence
    if role is None:
        return None
    arguments = dict(json.loads(operation.proposal.canonical)["arguments"])
    if role is EvidenceRole.PUBLICATION:
        return Issuance(result, lambda: _answer_question(operation, arguments["report"], now))
    if result is None:  # established by reconciliation: no bytes, no judgement to issue from
        return None
    if role is EvidenceRole.RECEIPT:
        return _receipt_plan(operation, arguments, result, now)
    return _attestation_plan(operation, arguments, result, now)


def _receipt_plan(operation: Operation, arguments: dict[str, Any], result: dict[str, Any],
                  now: datetime) -> Issuance:
    content = str(result["content"])
    data = content.encode("utf-8")
    question = arguments["question"]
    receipt = Receipt(
        id=new_id("evr"), tenant_id=operation.tenant_id, question_id=question["id"],
        question_revision=question["revision"], source=arguments["source"],
        content_digest=digest_bytes(data), retrieved_at=now, operation_id=operation.id)

    def write() -> None:
        receipt.save(force_insert=True)
        ReceiptContent.objects.create(receipt=receipt, content=data)
        audit_record(tenant_id=operation.tenant_id, kind=RECEIPT_ISSUED, actor="dispatcher",
                     at=now, operation_id=operation.id, proposal_id=operation.proposal_id,
                     digest=receipt.content_digest,
                     details={"receipt_id": receipt.id, "question_id": receipt.question_id,
                              "question_revision": receipt.question_revision,
                              "content_digest": receipt.content_digest})

    return Issuance({"receipt": receipt_json(receipt), "content": content}, write)


def _attestation_plan(operation: Operation, arguments: dict[str, Any],
                      result: dict[str, Any], now: datetime) -> Issuance:
    report = arguments["report"]
    # Bound to what the snapshot names, the report revision and the policy, never to what the
    # handler's answer says of them.
    attestation = Attestation(
        id=new_id("att"), tenant_id=operation.tenant_id, validator=result["validator"],
        policy=arguments["policy"], report_id=report["id"], report_revision=report["revision"],
        report_digest=report["digest"], evidence=list(result["evidence"]),
        result=result["result"], findings=list(result["findings"]), issued_at=now,
        operation_id=operation.id)

    def write() -> None:
        attestation.save(force_insert=True)
        # Only the exact revision judged, and only from draft: a report edited since, or
        # already attested, stays as it is; the attestation stands bound to what it judged.
        judged = {"id": report["id"], "revision": report["revision"]}
        attested = attestation.result == Attestation.Result.PASS and _move_if_allowed(
            judged, ResourceEvent.ATTEST, now)
        audit_record(tenant_id=operation.tenant_id, kind=ATTESTATION_ISSUED,
                     actor="dispatcher", at=now, operation_id=operation.id,
                     proposal_id=operation.proposal_id, digest=attestation.report_digest,
                     details={"attestation_id": attestation.id,
                              "validator": attestation.validator, "policy": attestation.policy,
                              "report_id": attestation.report_id,
                              "report_revision": attestation.report_revision,
                              "report_digest": attestation.report_digest,
                              "evidence": attestation.evidence, "result": attestation.result,
                              "findings": len(attestation.findings),
                              **audit_moves([judged] if attested else [],
                                            ResourceEvent.ATTEST)})

    return Issuance({"attestation": attestation_json(attestation)}, write)


def _answer_question(operation: Operation, report: dict[str, Any], now: datetime) -> None:
    question = report.get("links", {}).get("question")
    if question is None:
        return
    # The question's current revision: an edit of its wording since does not unanswer it.
    current = Resource.objects.filter(id=question["id"]).values_list(
        "current_revision", flat=True).first()
    ref = {"id": question["id"], "revision": current}
    if current is not None and _move_if_allowed(ref, ResourceEvent.ANSWER, now):
        audit_record(tenant_id=operation.tenant_id, kind=QUESTION_ANSWERED, actor="dispatcher",
                     at=now, operation_id=operation.id, proposal_id=operation.proposal_id,
                     details={"question_id": question["id"],
                              **audit_moves([ref], ResourceEvent.ANSWER)})


def _move_if_allowed(ref: dict[str, Any], event: ResourceEvent, now: datetime) -> bool:
    """Whether the move was made (the caller's audit event lists it)."""
    try:
        with transaction.atomic():  # a savepoint: a refused move leaves the outcome standing
            resource_move(ref=ref, event=event, now=now)
    except Denial:
        return False  # edited or moved on since: the record stands, the resource stays
    return True
