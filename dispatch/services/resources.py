"""Resources and their immutable revisions (docs/design.md#resources): creation and compare-and-swap
edits."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q

from dispatch.models import ApprovalRequest, Principal, Proposal, Resource, Revision
from dispatch.runtime import get_runtime
from dispatch.services.access import (
    access_resource_for_revision,
    resource_kinds_of,
    tool_message,
)
from dispatch.services.audit import audit_record
from dispatch.store import resources as store
from protocols.audit_kinds import audit_moves
from protocols.canonical import CanonicalizationError, digest, materialize_defaults
from protocols.contracts import ResourceKind, compile_schema, schema_errors
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject, JSONValue
from protocols.lifecycle import (
    RESOURCE_PROTOCOLS,
    ApprovalState,
    PermitState,
    ResourceEvent,
    transition,
)


def resource_kind(name: object) -> ResourceKind:
    kinds = get_runtime().resource_kinds
    if not isinstance(name, str) or name not in kinds:
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/kind", "message": f"must be one of {sorted(kinds)}"}])
    return kinds[name]


@functools.cache
def _validator(kind_name: str) -> Any:
    return compile_schema(get_runtime().resource_kinds[kind_name].payload_schema)


def _validated_payload(kind: ResourceKind, payload: JSONValue) -> tuple[JSONObject, str]:
    errors = schema_errors(_validator(kind.name), payload, root="/payload")
    if errors:
        raise Denial(DenialCode.SCHEMA_INVALID, errors=errors)
    full = materialize_defaults(kind.payload_schema, payload)
    try:
        return full, digest(full)
    except CanonicalizationError as exc:
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/payload" + exc.pointer, "message": exc.reason}]) from None


def resource_create(
    *, principal: Principal, kind: object, payload: JSONValue, now: datetime
) -> tuple[Resource, Revision]:
    """A new resource of `kind`, for a principal with a tool that takes that kind."""
    spec = resource_kind(kind)
    if spec.name not in resource_kinds_of(principal):
        raise Denial(DenialCode.TOOL_NOT_PERMITTED, tool_message(spec.name), kind=spec.name)
    full, payload_digest = _validated_payload(spec, payload)
    with transaction.atomic(durable=True):
        resource = Resource.objects.create(
            tenant_id=principal.tenant_id, kind=spec.name, current_revision=1,
            state=spec.protocol.initial, created_by=principal,
        )
        revision = Revision.objects.create(
            resource=resource, number=1, payload=full, digest=payload_digest,
            created_by=principal,
        )
        audit_record(tenant_id=principal.tenant_id, kind="resource.created", actor=principal.name,
                     at=now, digest=payload_digest,
                     details={"resource_id": resource.id, "revision": 1, "kind": spec.name})
    return resource, revision


def revision_create(
    *, principal: Principal, resource_id: object, base_revision: object, payload: JSONValue,
    now: datetime,
) -> tuple[Resource, Revision]:
    """A new revision in the initial state, if `base_revision` is still current (CAS); by the
    resource's creator or an admin (`access_resource_for_revision`)."""
    resource = access_resource_for_revision(principal, resource_id)
    spec = resource_kind(resource.kind)
    if not isinstance(base_revision, int) or isinstance(base_revision, bool):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/base_revision", "message": "must be an integer"}])
    full, payload_digest = _validated_payload(spec, payload)
    number = base_revision + 1
    with transaction.atomic(durable=True):
        # Compare-and-swap: only the holder of the current revision moves it on, from a
        # state that allows an edit.
        resource_move({"id": resource.id, "revision": base_revision}, ResourceEvent.EDIT,
                      now=now, revision_to=number)
        revision = Revision.objects.create(
            resource_id=resource.id, number=number, payload=full, digest=payload_digest,
            created_by=principal,
        )
        audit_record(tenant_id=principal.tenant_id, kind="resource.revised", actor=principal.name,
                     at=now, digest=payload_digest,
                     details={"resource_id": resource.id, "revision": number})
    # What the compare-and-swap wrote, without reading the row back: every edit makes a new
    # revision in the protocol's initial state.
    resource.current_revision, resource.updated_at = number, now
    resource.state = spec.protocol.initial
    return resource, revision


def resource_current(resource: Resource) -> Revision:
    return Revision.objects.get(resource_id=resource.id, number=resource.current_revision)


def moved_refs(refs: list[JSONObject]) -> list[JSONObject]:
    """The refs of the resources an operation moves: every one but those it only reads."""
    return [ref for ref in refs if not ref.get("read")]


def resource_move(
    ref: JSONObject, event: ResourceEvent, *, now: datetime, revision_to: int | None = None,
) -> None:
    """Move a referenced resource by `event`: THE one owner of a resource's state.

    One compare-and-swap (`dispatch.store.resources.move`) on the revision and on every
    (kind, state) the transition tables allow `event` from, each moving to its own target;
    nothing is read unless it fails. Call inside a transaction: a refusal (`stale_revision` if
    the revision moved on, `protocol_state_invalid` if the state does not allow `event`) rolls
    the caller back whole. `revision_to`: the new current revision the same update writes (an
    edit's).
    """
    # The kinds' tables are registered by the extensions as the runtime loads: load it first,
    # or a process whose first act is a revocation (a web worker, a script) knows no kind and
    # fails on it (found by the chaos soak).
    get_runtime()
    if not store.move(id=ref["id"], revision=ref["revision"], event=event, now=now,
                      revision_to=revision_to):
        raise _refusal(ref, event)


def _refusal(ref: JSONObject, event: ResourceEvent) -> Denial:
    # Failure path only: one read to say which precondition failed.
    current = Resource.objects.filter(id=ref["id"]).values_list(
        "current_revision", "state", "kind").first()
    if current is None:
        return Denial(DenialCode.NOT_FOUND, kind="resource", id=ref["id"])
    revision, state, kind = current
    if revision != ref["revision"]:
        return Denial(DenialCode.STALE_REVISION, resource_id=ref["id"],
                      current_revision=revision)
    try:
        transition(RESOURCE_PROTOCOLS[kind], state, event)
    except Denial as denial:
        return Denial(denial.code, denial.message, resource_id=ref["id"], **denial.details)
    # Allowed now, refused a moment ago: it moved meanwhile; the caller may try again.
    return Denial(DenialCode.PROTOCOL_STATE_INVALID, "The resource moved meanwhile; reload it.",
                  resource_id=ref["id"], state=state)


def resources_release(
    *, proposal: Proposal, event: ResourceEvent, actor: str, now: datetime
) -> None:
    """Move each resource of a proposal that will not run by `event` (deny or expire), best
    effort, inside the caller's transaction; `resource.released` lists what moved (for the
    audit's replay, `audit_moves`), if anything did.

    A revision edited since, or one that still carries another live proposal, is left as it
    is: the first has moved on, and moving the second would strand its siblings.
    """
    moved = []
    for ref in moved_refs(proposal.resource_refs):
        if revision_has_other_live_approvals(ref=ref, proposal_id=proposal.id, now=now):
            continue
        try:
            with transaction.atomic():
                resource_move(ref, event, now=now)
        except Denial:
            continue  # edited or moved on since: nothing to move back
        moved.append(ref)
    if moved:
        audit_record(tenant_id=proposal.tenant_id, kind="resource.released", actor=actor,
                     at=now, proposal_id=proposal.id, digest=proposal.digest,
                     details=audit_moves(moved, event))


def revision_has_other_live_approvals(
    *, ref: JSONObject, proposal_id: str, now: datetime
) -> bool:
    """Another proposal of this exact revision still waits for, or holds, an approval.

    A lapse, denial or cancellation of one proposal must then leave the shared resource's
    state alone, or it would strand its siblings (a revision may carry several proposals).
    """
    siblings = ApprovalRequest.objects.filter(
        proposal__resources__resource_id=ref["id"],
        proposal__resources__revision=ref["revision"],
        expires_at__gt=now,
    ).exclude(proposal_id=proposal_id)
    return siblings.filter(
        Q(state=ApprovalState.PENDING) | Q(state=ApprovalState.GRANTED,
                                           permit__state=PermitState.ISSUED)).exists()
