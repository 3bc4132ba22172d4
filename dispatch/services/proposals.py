"""Proposals: the immutable snapshot of one exact action (docs/design.md#proposals,
docs/rest-api.md#calls; docs/design.md#approvals).

A proposal is checked like a dispatch (tool set, schema, resources, authority), so no human is
asked to approve what could never run; dispatch checks everything again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction

from dispatch.ids import new_id
from dispatch.models import ApprovalRequest, Principal, Proposal, ProposalResource
from dispatch.runtime import get_runtime
from dispatch.services.admission import Admission, admit, validate_arguments
from dispatch.services.approvals import approval_open
from dispatch.services.audit import audit_binding, audit_record
from dispatch.services.authority import select_authority
from dispatch.services.resources import moved_refs, resource_move
from dispatch.services.run_tree import path_authority_refusal, path_stop_refusal, principal_path
from dispatch.store.sql import insert, pipelined
from protocols.audit_kinds import audit_moves
from protocols.canonical import (
    CanonicalizationError,
    canonicalize,
)
from protocols.contracts import OperationContract
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject, JSONValue
from protocols.lifecycle import (
    ResourceEvent,
)

#: An execution id (docs/rest-api.md#calls), matched whole: no trailing newline slips through.
EXECUTION_ID_SHAPE = "[A-Za-z0-9_.:-]{1,80}"
EXECUTION_ID = re.compile(EXECUTION_ID_SHAPE)
EXECUTION_ID_RULE = f"must be a string matching {EXECUTION_ID_SHAPE}"
#: A call id (docs/rest-api.md#proposal): 1 to 200 printable ASCII characters, space included.
CALL_ID = re.compile(r"[ -~]{1,200}")
CALL_ID_RULE = "must be a string of 1 to 200 printable ASCII characters"


#: A run in one of these states proposes nothing more (docs/workflows.md#deadlines).
#: The longest client description a proposal keeps.
CLIENT_MAX = 200


@dataclass(frozen=True)
class Origin:
    """Where a proposal came in: `channel` "" (the REST API, the embedded runtime) or "mcp", and
    the client's own name and version as it gave them (shown to operators, never trusted)."""

    channel: str = ""
    client: str = ""


@dataclass(frozen=True)
class Intake:
    """The proposal of one request, and whether this request made it (docs/rest-api.md#calls: 201
    for the first proposal of a call, 200 for a repeat)."""

    proposal: Proposal
    created: bool
    approval: ApprovalRequest | None = None  # the request this intake opened, if it made one


def proposal_create(
    *,
    principal: Principal,
    operation: object,
    arguments: JSONValue,
    execution_id: object = None,
    approval_expires_in: object = None,
    dispatch_on_approval: object = False,
    call_id: object = None,
    now: datetime,
) -> Proposal:
    """`proposal_intake`, for callers that need only the proposal."""
    return proposal_intake(
        principal=principal, operation=operation, arguments=arguments,
        execution_id=execution_id, approval_expires_in=approval_expires_in,
        dispatch_on_approval=dispatch_on_approval, call_id=call_id, now=now).proposal


def proposal_intake(
    *,
    principal: Principal,
    operation: object,
    arguments: JSONValue,
    execution_id: object = None,
    approval_expires_in: object = None,
    dispatch_on_approval: object = False,
    call_id: object = None,
    now: datetime,
    origin: Origin = Origin(),
) -> Intake:
    """`_intake`. Every refusal is audited as `intake.denied` with its code, as the
    dispatcher's are as `dispatch.denied` (so /metrics counts both), then raised."""
    try:
        return _intake(principal=principal, operation=operation, arguments=arguments,
                       execution_id=execution_id, approval_expires_in=approval_expires_in,
                       dispatch_on_approval=dispatch_on_approval, call_id=call_id, now=now,
                       origin=origin)
    except Denial as denial:
        with transaction.atomic():
            audit_record(tenant_id=principal.tenant_id, kind="intake.denied",
                         actor=principal.name, at=now, details={"code": denial.code.value})
        raise


def _intake(
    *,
    principal: Principal,
    operation: object,
    arguments: JSONValue,
    execution_id: object = None,
    approval_expires_in: object = None,
    dispatch_on_approval: object = False,
    call_id: object = None,
    now: datetime,
    origin: Origin = Origin(),
) -> Intake:
    """Snapshot one exact action and open its approval request if the contract needs one.

    A `call_id` makes intake idempotent (docs/rest-api.md#proposal): the same principal, execution
    id and call id answer with the proposal made first, and another action under them is
    `proposal_mismatch`, also when both requests race. Without an execution id the call id is
    the principal's alone. "The same action" is the same operation with the same validated
    arguments (defaults materialized, normalizers applied), compared by their canonical
    bytes; the other request fields (approval window, `dispatch_on_approval`) are the first
    request's.
    """
    runtime = get_runtime()
    contract = runtime.contract(operation)
    if contract.qualified_name not in principal.tools:
        raise Denial(DenialCode.TOOL_NOT_PERMITTED, operation=contract.qualified_name)
    call = _checked_call_id(call_id)
    named = execution_id is not None
    if execution_id is None:
        execution_id = new_id("exe")
    if not isinstance(execution_id, str) or not EXECUTION_ID.fullmatch(execution_id):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/execution_id", "message": EXECUTION_ID_RULE}])
    # The call id's scope: the execution the caller named, or the principal alone.
    call_scope = execution_id if named else ""
    if not isinstance(dispatch_on_approval, bool):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/dispatch_on_approval", "message": "must be a boolean"}])
    expires_in = _approval_window(contract, approval_expires_in)
    full = validate_arguments(contract, arguments)
    if call is not None:
        existing = _first_proposal_of_call(principal, call_scope, call, contract, full)
        if existing is not None:
            return Intake(existing, created=False)
    # The execution's path to its run's root (docs/design.md#run-trees): a run that timed out
    # or was cancelled, or any execution enclosing this one, proposes nothing more
    # (docs/workflows.md#deadlines): its actions were stopped with it.
    path = principal_path(execution_id, principal.id) if named else []
    stopped = path_stop_refusal(path, now=now, action="it proposes nothing more")
    if stopped is not None:
        raise stopped
    admission = admit(contract, principal, full, now=now,
                      resource_event=ResourceEvent.PROPOSE)
    # The authority in force is the grants' (checked by `admit`) within what every execution
    # on the path declares: an agent step's call is held to its workflow's `authority:`.
    outside = path_authority_refusal(path, contract.qualified_name,
                                     select_authority(contract, admission.resolved.arguments))
    if outside is not None:
        raise outside
    try:
        proposal, approval = _proposal_insert(
            admission, execution_id=execution_id, dispatch_on_approval=dispatch_on_approval,
            call_scope=call_scope, call_id=call or "", expires_in=expires_in, now=now,
            origin=origin)
        return Intake(proposal, created=True, approval=approval)
    except IntegrityError:
        # Another request of this call committed first, after the look-up above: the unique
        # constraint `one_proposal_per_call` decided, and its proposal is compared just the
        # same, so the loser of a race never gets a silent answer for another action.
        if call is None:
            raise
        existing = _first_proposal_of_call(principal, call_scope, call, contract, full)
        if existing is None:
            raise
        return Intake(existing, created=False)


def _checked_call_id(call_id: object) -> str | None:
    if call_id is None:
        return None
    if not isinstance(call_id, str) or not CALL_ID.fullmatch(call_id):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/call_id", "message": CALL_ID_RULE}])
    return call_id


def _first_proposal_of_call(
    principal: Principal, call_scope: str, call_id: str, contract: OperationContract,
    full: JSONObject,
) -> Proposal | None:
    """The proposal of this call, if any; `proposal_mismatch` if it is another action."""
    existing = Proposal.objects.filter(principal=principal, call_scope=call_scope,
                                       call_id=call_id).first()
    if existing is None:
        return None
    same = (existing.operation == contract.qualified_name
            and _same_arguments(existing.arguments, full))
    if not same:
        where = "of this execution" if call_scope else "of this principal"
        raise Denial(DenialCode.PROPOSAL_MISMATCH,
                     f"Call {call_id!r} {where} already proposed another action; "
                     "use a new call_id for a new action.", proposal_id=existing.id)
    return existing


def _same_arguments(stored: JSONValue, full: JSONObject) -> bool:
    """The same canonical bytes (`1` and `1.0`, `true` and `1` differ; key order does not)."""
    try:
        return canonicalize(stored) == canonicalize(full)
    except CanonicalizationError:
        return False


def _proposal_insert(
    admission: Admission, *, execution_id: str, dispatch_on_approval: bool, call_scope: str,
    call_id: str, expires_in: int | None, now: datetime, origin: Origin,
) -> tuple[Proposal, ApprovalRequest | None]:
    principal, contract, runtime = admission.principal, admission.contract, admission.runtime
    full, resolved, proposal_digest = admission.arguments, admission.resolved, admission.digest
    canonical = admission.canonical.decode()  # the bytes hashed, not a second encoding
    with transaction.atomic(durable=True), pipelined():
        proposal = insert(Proposal(
            tenant_id=principal.tenant_id, principal=principal, execution_id=execution_id,
            operation=contract.qualified_name, contract_version=contract.contract_version,
            contract_fingerprint=contract.fingerprint, arguments=full,
            canonical=canonical, digest=proposal_digest, resource_refs=resolved.refs,
            destination_fingerprint=runtime.destination_fingerprint(contract),
            policy_fingerprint=runtime.policy_fingerprint(contract),
            dispatch_on_approval=dispatch_on_approval, call_scope=call_scope, call_id=call_id,
            created_at=now, channel=origin.channel, client=origin.client[:CLIENT_MAX],
        ))
        for ref in resolved.refs:
            ProposalResource.objects.create(proposal=proposal, resource_id=ref["id"],
                                            revision=ref["revision"])
        for ref in moved_refs(resolved.refs):
            resource_move(ref, ResourceEvent.PROPOSE, now=now)
        audit_record(tenant_id=principal.tenant_id, kind="proposal.created",
                     actor=principal.name, at=now, proposal_id=proposal.id,
                     digest=proposal_digest,
                     # The snapshot is referenced by the proposal's id and digest: the
                     # audit holds no argument value (docs/design.md#audit).
                     details={"operation": contract.qualified_name,
                              **audit_binding(proposal),
                              **audit_moves(moved_refs(resolved.refs), ResourceEvent.PROPOSE)})
        approval = None
        if expires_in is not None:
            assert contract.approval_requirement is not None
            approval = approval_open(
                proposal=proposal, role=contract.approval_requirement.role,
                quorum=runtime.approval_quorum(contract, resolved.arguments),
                expires_at=now + timedelta(seconds=expires_in), actor=principal.name, now=now)
    return proposal, approval


def _approval_window(contract: OperationContract, requested: object) -> int | None:
    """The contract's approval expiry, shortened (never lengthened) by the caller."""
    if contract.approval_requirement is None:
        return None
    limit = contract.approval_requirement.expires_in
    if requested is None:
        return limit
    if not isinstance(requested, int) or isinstance(requested, bool) or requested < 1:
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/approval_expires_in", "message": "must be a positive integer"}])
    return min(requested, limit)
