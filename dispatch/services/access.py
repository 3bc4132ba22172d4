"""Authorizing loaders (docs/design.md#choke-points): one function per protected kind, one error for
missing and forbidden, so another tenant's id answers exactly like a forged one: `not_found`.
What a loader found names the log lines of its request or task (`proposal_id`,
`operation_id`, docs/design.md#running); an id that names nothing visible names nothing."""

from __future__ import annotations

from typing import TypeVar

from django.db import models

from dispatch.models import (
    ApprovalRequest,
    Attestation,
    Grant,
    Operation,
    Principal,
    Proposal,
    Receipt,
    Resource,
)
from dispatch.observability.context import bind_ids
from dispatch.runtime import get_runtime
from dispatch.store import loads
from protocols.denials import Denial, DenialCode
from protocols.roles import Role, role_allows

M = TypeVar("M", bound=models.Model)


def _access(model: type[M], principal: Principal, object_id: object, kind: str,
            *related: str) -> M:
    if not isinstance(object_id, str):
        raise Denial(DenialCode.NOT_FOUND, kind=kind)
    try:
        return _logged(model._default_manager.select_related(*related).get(
            id=object_id, tenant_id=principal.tenant_id))
    except model.DoesNotExist:  # type: ignore[attr-defined]  # the plugin gives it to concrete models only
        raise Denial(DenialCode.NOT_FOUND, kind=kind, id=object_id) from None


def _logged(found: M) -> M:
    """`found`, its action's ids bound to the log lines of this request or task."""
    if isinstance(found, Proposal):
        bind_ids(proposal_id=found.id)
    elif isinstance(found, ApprovalRequest):
        bind_ids(proposal_id=found.proposal_id)
    elif isinstance(found, Operation):
        bind_ids(proposal_id=found.proposal_id, operation_id=found.id)
    return found


def resource_kinds_of(principal: Principal) -> frozenset[str]:
    """The resource kinds an operation of the principal's tool set takes (each contract's
    `protocol_preconditions`): the kinds it may create, and revise or read."""
    tools = set(principal.tools)
    return frozenset(kind for contract in get_runtime().registry
                     if contract.qualified_name in tools
                     for kind in contract.protocol_preconditions.values())


def _is_admin(principal: Principal) -> bool:
    return principal.kind == Principal.Kind.HUMAN and role_allows(principal.role, Role.ADMIN)


def access_resource_by_id(principal: Principal, resource_id: object) -> Resource:
    """A resource for reading: by its creator, the tenant's admins, and principals with a tool
    that takes its kind. To anyone else it does not exist (`not_found`, as a forged id)."""
    resource = _access(Resource, principal, resource_id, "resource")
    if resource.created_by_id == principal.id:
        return resource
    if _is_admin(principal):
        return resource
    if resource.kind in resource_kinds_of(principal):
        return resource
    raise Denial(DenialCode.NOT_FOUND, kind="resource", id=resource_id)


def access_resource_for_revision(principal: Principal, resource_id: object) -> Resource:
    """A resource for a new revision: by its creator, or an admin of the tenant. To anyone
    else it does not exist (`not_found`, as a forged id); a creator none of whose tools takes
    the kind any more is `tool_not_permitted`."""
    resource = _access(Resource, principal, resource_id, "resource")
    if _is_admin(principal):
        return resource
    if resource.created_by_id != principal.id:
        raise Denial(DenialCode.NOT_FOUND, kind="resource", id=resource_id)
    if resource.kind not in resource_kinds_of(principal):
        raise Denial(DenialCode.TOOL_NOT_PERMITTED, tool_message(resource.kind),
                     kind=resource.kind)
    return resource


def tool_message(kind: str) -> str:
    return (f"No operation in this principal's tool set takes a resource of kind {kind}; "
            "ask an admin to add one.")


def access_proposal_by_id(principal: Principal, proposal_id: object) -> Proposal:
    return _access(Proposal, principal, proposal_id, "proposal")


def access_proposal_for_dispatch(principal: Principal, proposal_id: object) -> Proposal:
    """The proposal with its approval request and permit, in one fixed query (the hot path),
    of the principal's tenant; `not_found` like every other loader."""
    if not isinstance(proposal_id, str):
        raise Denial(DenialCode.NOT_FOUND, kind="proposal")
    proposal = loads.proposal_for_dispatch(id=proposal_id, tenant_id=principal.tenant_id)
    if proposal is None:
        raise Denial(DenialCode.NOT_FOUND, kind="proposal", id=proposal_id)
    return _logged(proposal)


def access_approval_for_review(principal: Principal, approval_id: object) -> ApprovalRequest:
    """The approval request with everything its page shows, in one query."""
    return _access(ApprovalRequest, principal, approval_id, "approval", "proposal__principal",
                   "decision__approver", "permit")


def access_approval_for_decision(principal: Principal, approval_id: object) -> ApprovalRequest:
    """The approval request with its proposal and the proposal's requester, in one fixed query
    (the hot path of a decision), of the principal's tenant; `not_found` like every other
    loader."""
    if not isinstance(approval_id, str):
        raise Denial(DenialCode.NOT_FOUND, kind="approval")
    approval = loads.approval_for_decision(id=approval_id, tenant_id=principal.tenant_id)
    if approval is None:
        raise Denial(DenialCode.NOT_FOUND, kind="approval", id=approval_id)
    return _logged(approval)


def access_operation_by_id(principal: Principal, operation_id: object) -> Operation:
    return _access(Operation, principal, operation_id, "operation")


def access_operation_for_page(principal: Principal, operation_id: object) -> Operation:
    """The operation with its proposal and principal, in one query."""
    return _access(Operation, principal, operation_id, "operation", "proposal", "principal")


def access_grant_by_id(principal: Principal, grant_id: object) -> Grant:
    return _access(Grant, principal, grant_id, "grant")


def access_question_for_review(principal: Principal, question_id: object) -> Resource:
    """A question (docs/design.md#evidence) for the console's evidence page: to the operators and
    admins of its tenant. Another tenant's id, a resource of another kind and a missing id are one
    `not_found`."""
    resource = _access(Resource, principal, question_id, "question")
    if resource.kind != "question":
        raise Denial(DenialCode.NOT_FOUND, kind="question", id=question_id)
    if principal.kind != Principal.Kind.HUMAN:
        raise Denial(DenialCode.NOT_FOUND, kind="question", id=question_id)
    if not role_allows(principal.role, Role.OPERATOR):
        raise Denial(DenialCode.NOT_FOUND, kind="question", id=question_id)
    return resource


def access_receipt_by_id(principal: Principal, receipt_id: object) -> Receipt:
    """An evidence receipt of the principal's tenant (docs/design.md#evidence); else `not_found`."""
    return _access(Receipt, principal, receipt_id, "receipt")


def access_attestation_by_id(principal: Principal, attestation_id: object) -> Attestation:
    """An attestation of the principal's tenant (docs/design.md#evidence); else `not_found`."""
    return _access(Attestation, principal, attestation_id, "attestation")
