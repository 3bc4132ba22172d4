"""Authorizing loaders (STYLE §3): one function per protected kind, one error for missing and
forbidden, so another tenant's id answers exactly like a forged one: `not_found`."""

from __future__ import annotations

from typing import TypeVar

from django.db import models

from dispatch.models import (
    ApprovalRequest,
    Grant,
    Operation,
    Principal,
    Proposal,
    Resource,
)
from protocols.denials import Denial, DenialCode

M = TypeVar("M", bound=models.Model)


def _access(model: type[M], principal: Principal, object_id: object, kind: str,
            *related: str) -> M:
    if not isinstance(object_id, str):
        raise Denial(DenialCode.NOT_FOUND, kind=kind)
    try:
        return model._default_manager.select_related(*related).get(
            id=object_id, tenant_id=principal.tenant_id)
    except model.DoesNotExist:  # type: ignore[attr-defined]
        raise Denial(DenialCode.NOT_FOUND, kind=kind, id=object_id) from None


def access_resource_by_id(principal: Principal, resource_id: object) -> Resource:
    return _access(Resource, principal, resource_id, "resource")


def access_proposal_by_id(principal: Principal, proposal_id: object) -> Proposal:
    return _access(Proposal, principal, proposal_id, "proposal")


def access_proposal_for_dispatch(principal: Principal, proposal_id: object) -> Proposal:
    """The proposal with its approval request and permit, in one query (the hot path)."""
    return _access(Proposal, principal, proposal_id, "proposal", "approval", "permit")


def access_approval_for_review(principal: Principal, approval_id: object) -> ApprovalRequest:
    """The approval request with everything its page shows, in one query."""
    return _access(ApprovalRequest, principal, approval_id, "approval", "proposal__principal",
                   "decision__approver", "permit")


def access_approval_for_decision(principal: Principal, approval_id: object) -> ApprovalRequest:
    """The approval request with its proposal and the proposal's requester, in one query."""
    return _access(ApprovalRequest, principal, approval_id, "approval", "proposal__principal")


def access_operation_by_id(principal: Principal, operation_id: object) -> Operation:
    return _access(Operation, principal, operation_id, "operation")


def access_operation_for_page(principal: Principal, operation_id: object) -> Operation:
    """The operation with its proposal and principal, in one query."""
    return _access(Operation, principal, operation_id, "operation", "proposal", "principal")


def access_grant_by_id(principal: Principal, grant_id: object) -> Grant:
    return _access(Grant, principal, grant_id, "grant")
