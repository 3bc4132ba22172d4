"""The research flow's outcome hooks and admission checks (docs/design.md#evidence), registered by
`demo.extension` with the contracts they serve (`dispatch.hooks`).

- `evidence_issue`, the outcome hook of every contract with an evidence role: a fetch's
  completion issues a receipt, an attest's an attestation (a `pass` attests the exact report
  revision judged), a publication's answers the report's question, once. Only a completion (or
  a reconciled one, for a publication) issues. The records are the store's
  (`dispatch.services.evidence`): this module only says which, from what.
- `attestation_check`: a publication rests on a passing attestation of the exact report
  revision, under the contract's policy (`attestation_refusal`, before the report's state, so
  the code names the attestation).
- `evidence_check`: a fetch's source is on the deployment's allow-list; an attest's policy has
  a validator.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks

from dispatch.hooks import AdmissionContext, Issuance, OutcomeContext
from dispatch.models import Resource
from dispatch.runtime import get_runtime
from dispatch.services.audit import audit_record
from dispatch.services.evidence import (
    attestation_issue,
    attestation_refusal,
    receipt_issue,
    resource_move_if_allowed,
)
from protocols.audit_kinds import QUESTION_ANSWERED, audit_moves
from protocols.contracts import EvidenceRole
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import OperationState, ResourceEvent
from protocols.sources import allowlist_entry_problem, source_allowed, source_problem

#: The operation states whose recording issues the contract's evidence record: a publication
#: that reconciliation establishes answers its question as one that completed does.
_ISSUING_STATES = frozenset({OperationState.COMPLETED, OperationState.RECONCILED_COMPLETED})


def evidence_issue(ctx: OutcomeContext) -> Issuance | None:
    """The record the contract's evidence role has the dispatcher issue on this outcome, or
    None (`dispatch.hooks.OutcomeHook`):

    - `receipt`: over the exact bytes of the handler's `content`, for the question revision
      the snapshot bound;
    - `attestation`: the handler's judgement, bound to the report revision the snapshot bound;
      a `pass` moves that revision to `attested` when it is still the current draft;
    - `publication`: the report's question is answered, once.
    """
    if ctx.target not in _ISSUING_STATES:
        return None
    role, arguments, result = ctx.contract.evidence, ctx.arguments, ctx.result
    if role is EvidenceRole.PUBLICATION:
        return Issuance(result, lambda: _answer_question(ctx, arguments["report"]))
    if result is None:  # established by reconciliation: no bytes, no judgement to issue from
        return None
    if role is EvidenceRole.RECEIPT:
        return receipt_issue(ctx, question=arguments["question"], source=arguments["source"],
                             content=str(result["content"]))
    if role is EvidenceRole.ATTESTATION:
        return attestation_issue(ctx, report=arguments["report"], policy=arguments["policy"],
                                 judgement=result, on_pass=ResourceEvent.ATTEST)
    return None


def _answer_question(ctx: OutcomeContext, report: dict[str, Any]) -> None:
    question = report.get("links", {}).get("question")
    if question is None:
        return
    operation = ctx.operation
    # The question's current revision: an edit of its wording since does not unanswer it.
    current = Resource.objects.filter(id=question["id"]).values_list(
        "current_revision", flat=True).first()
    ref = {"id": question["id"], "revision": current}
    if current is not None and resource_move_if_allowed(ref, ResourceEvent.ANSWER, ctx.now):
        audit_record(tenant_id=operation.tenant_id, kind=QUESTION_ANSWERED, actor="dispatcher",
                     at=ctx.now, operation_id=operation.id, proposal_id=operation.proposal_id,
                     details={"question_id": question["id"],
                              **audit_moves([ref], ResourceEvent.ANSWER)})


# --- admission ----------------------------------------------------------------------------

def attestation_check(ctx: AdmissionContext) -> Denial | None:
    """docs/design.md#evidence: the attestation a publication rests on (`attestation_refusal`)."""
    return attestation_refusal(ctx.contract, ctx.principal, ctx.arguments, ctx.resolved)


def evidence_check(ctx: AdmissionContext) -> Denial | None:
    """What an evidence operation is refused before it is proposed or run: a fetch of a
    source off the deployment's allow-list (`EVIDENCE_SOURCE_ALLOWLIST`, URL prefixes matched
    by scheme, host, port and whole path segments: `protocols.sources`) is
    `effect_not_permitted` (the deployment does not permit reading it); an attest under a
    policy no registered validator serves is `schema_invalid` at `/arguments/policy`."""
    contract, arguments = ctx.contract, ctx.arguments
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
    """The URL prefixes a fetch may read: the setting, else the demo's sources."""
    configured = list(settings.EVIDENCE_SOURCE_ALLOWLIST)
    return configured or [str(settings.DESTINATIONS["sources_url"]).rstrip("/") + "/"]


def check_source_allowlist(**_: Any) -> list[checks.CheckMessage]:
    """Every `EVIDENCE_SOURCE_ALLOWLIST` entry is one `protocols.sources` can match: an entry
    it must ignore would silently shrink the list. (Its id is the one it had before the check
    moved here from `dispatch`, so a deployment that silences it keeps doing so.)"""
    return [checks.Error(f"EVIDENCE_SOURCE_ALLOWLIST entry {entry!r} cannot be used: {problem}.",
                         hint="Name a scheme, a host, an optional port and a path prefix, "
                              "e.g. https://docs.example.org/public/",
                         id="dispatch.E002")
            for entry in settings.EVIDENCE_SOURCE_ALLOWLIST
            if (problem := allowlist_entry_problem(entry)) is not None]
