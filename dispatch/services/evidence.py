"""Evidence receipts and attestations (docs/design.md#evidence): trusted records of the store.

A receipt or an attestation is written only by `receipt_issue` or `attestation_issue`, inside
the transaction that records its operation's outcome: each takes the `OutcomeContext` that only
the one owner of an operation's state (`dispatch.services.operations.operation_move`) mints and
hands to the outcome hook its contract's extension registered (`dispatch.hooks`). So no API,
model output or agent-supplied JSON can create one, and an outcome that is not recorded issues
none. `attestation_refusal`, an admission check an extension registers, says whether an action
rests on a passing attestation of the exact resource revision its contract names.

The validator runs on the worker, inside the attesting contract's handler
(`attestation_judge`): it sees the report revision the snapshot bound, the receipts of the
report's tenant that the report cites, and, for each, the bytes its source serves now, read
through the handler; so a source whose bytes changed since its receipt fails the citation.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db import transaction

from dispatch.handlers import DefiniteFailure, HandlerContext, UncertainOutcome, within_deadline
from dispatch.hooks import Issuance, OutcomeContext
from dispatch.ids import new_id
from dispatch.models import (
    Attestation,
    Principal,
    Receipt,
    ReceiptContent,
)
from dispatch.runtime import get_runtime
from dispatch.services.audit import audit_record
from dispatch.services.resources import resource_move
from protocols.audit_kinds import ATTESTATION_ISSUED, RECEIPT_ISSUED, audit_moves
from protocols.canonical import digest_bytes
from protocols.contracts import OperationContract
from protocols.denials import Denial, DenialCode
from protocols.evidence import Citation, Judgement, ReceiptView, ReportView
from protocols.jsontypes import JSONObject
from protocols.lifecycle import ResourceEvent


def _utc(at: datetime) -> str:
    """ISO 8601 with `Z`, as the API's serializers write a UTC time."""
    return at.isoformat().replace("+00:00", "Z")


def receipt_json(receipt: Receipt) -> JSONObject:
    """A receipt as the API and a fetch's result show it (docs/design.md#evidence)."""
    return {"id": receipt.id,
            "question": {"id": receipt.question_id, "revision": receipt.question_revision},
            "source": receipt.source, "content_digest": receipt.content_digest,
            "retrieved_at": _utc(receipt.retrieved_at),
            "operation_id": receipt.operation_id}


def attestation_json(attestation: Attestation) -> JSONObject:
    """An attestation as the API and an attest's result show it (docs/design.md#evidence)."""
    return {"id": attestation.id, "validator": attestation.validator,
            "policy": attestation.policy,
            "report": {"id": attestation.report_id, "revision": attestation.report_revision,
                       "digest": attestation.report_digest},
            "evidence": list(attestation.evidence), "result": attestation.result,
            "findings": list(attestation.findings),
            "issued_at": _utc(attestation.issued_at)}


# --- admission ----------------------------------------------------------------------------

def attestation_refusal(
    contract: OperationContract, principal: Principal, arguments: JSONObject,
    resolved: JSONObject,
) -> Denial | None:
    """docs/design.md#evidence, in order: no such attestation visible to the principal's tenant is
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


def attestation_judge(ctx: HandlerContext, read_source: SourceReader) -> JSONObject:
    """Run the validator serving the snapshot's `policy` on the snapshot's report revision:
    the handler's result, which the outcome hook turns into the attestation
    (`attestation_issue`).

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


def _report_view(ref: JSONObject) -> ReportView:
    payload = ref["payload"]
    return ReportView(
        id=ref["id"], revision=ref["revision"], digest=ref["digest"],
        question_id=str(payload["question"]), title=str(payload["title"]),
        body=str(payload["body"]),
        citations=tuple(Citation(receipt=str(c["receipt"]), quote=str(c["quote"]))
                        for c in payload["citations"]))


# --- issuance, inside the outcome's transaction ---------------------------------------------

def receipt_issue(ctx: OutcomeContext, *, question: JSONObject, source: str,
                  content: str) -> Issuance:
    """A receipt over the exact bytes of `content` (strict UTF-8, so the text encodes back to
    the bytes retrieved) from `source`, for the `question` revision (`{"id","revision"}`) the
    snapshot bound. Ids and times are chosen here, so the result the operation keeps already
    names the record."""
    operation, now = ctx.operation, ctx.now
    data = content.encode("utf-8")
    receipt = Receipt(
        id=new_id("evr"), tenant_id=operation.tenant_id, question_id=question["id"],
        question_revision=question["revision"], source=source,
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


def attestation_issue(ctx: OutcomeContext, *, report: JSONObject, policy: str,
                      judgement: JSONObject, on_pass: str | None) -> Issuance:
    """The validator's `judgement` (the handler's answer) as an attestation bound to the
    `report` revision (`{"id","revision","digest"}`) and `policy` the snapshot bound, never to
    what the answer says of them; a `pass` moves that exact revision by `on_pass` (an event of
    its kind's table) when its state allows it."""
    operation, now = ctx.operation, ctx.now
    attestation = Attestation(
        id=new_id("att"), tenant_id=operation.tenant_id, validator=judgement["validator"],
        policy=policy, report_id=report["id"], report_revision=report["revision"],
        report_digest=report["digest"], evidence=list(judgement["evidence"]),
        result=judgement["result"], findings=list(judgement["findings"]), issued_at=now,
        operation_id=operation.id)

    def write() -> None:
        attestation.save(force_insert=True)
        # Only the exact revision judged, and only from a state that allows it: a report
        # edited since, or already attested, stays as it is; the attestation stands bound to
        # what it judged.
        judged = {"id": report["id"], "revision": report["revision"]}
        attested = (attestation.result == Attestation.Result.PASS and on_pass is not None
                    and resource_move_if_allowed(judged, on_pass, now))
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
                              **(audit_moves([judged], ResourceEvent(on_pass))
                                 if attested and on_pass else {})})

    return Issuance({"attestation": attestation_json(attestation)}, write)


def resource_move_if_allowed(ref: JSONObject, event: str, now: datetime) -> bool:
    """Inside an outcome's transaction: move the resource revision `ref` by `event` if its
    state allows it; whether it moved (the caller's audit event lists it)."""
    try:
        with transaction.atomic():  # a savepoint: a refused move leaves the outcome standing
            resource_move(ref=ref, event=ResourceEvent(event), now=now)
    except Denial:
        return False  # edited or moved on since: the record stands, the resource stays
    return True
