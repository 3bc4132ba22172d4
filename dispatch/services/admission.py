"""Admission (docs/design.md#dispatcher steps 1-4): what every stage checks before it acts.

`admit` is the one pipeline that proposal, decision, dispatch and retry run: the contract's
arguments validated with defaults materialized, resource handles resolved through the store
(never from client fields), authority decided over the concrete values, and the canonical
snapshot the operator sees and the permit binds, with its digest. A stage that acts on an
existing proposal passes its digest: a snapshot that no longer matches is refused.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dispatch.hooks import AdmissionContext
from dispatch.models import Principal, Proposal, Resource, Revision
from dispatch.runtime import Runtime, get_runtime
from dispatch.services.authority import check_authority
from dispatch.store import loads
from protocols.canonical import (
    CANON_VERSION,
    CanonicalizationError,
    canonicalize,
    digest_bytes,
    materialize_defaults,
)
from protocols.contracts import OperationContract
from protocols.denials import Denial, DenialCode
from protocols.grants import Grant as CoreGrant
from protocols.jsontypes import JSONObject, JSONValue
from protocols.lifecycle import RESOURCE_PROTOCOLS, ResourceEvent, transition


@dataclass(frozen=True)
class Resolved:
    """Arguments with every resource reference resolved through the store."""

    arguments: JSONObject
    refs: list[JSONObject]
    states: dict[str, str] = field(default_factory=dict)  # argument -> the resource's state


def validate_arguments(contract: OperationContract, arguments: JSONValue) -> JSONObject:
    """Schema-check, materialize defaults and normalize: the exact arguments that will run."""
    if not isinstance(arguments, dict):
        raise Denial(DenialCode.SCHEMA_INVALID,
                     errors=[{"pointer": "/arguments", "message": "must be an object"}])
    errors = contract.schema_errors(arguments)
    if errors:
        raise Denial(DenialCode.SCHEMA_INVALID, errors=errors)
    full = materialize_defaults(contract.input_type, arguments)
    return contract.normalize(full)


def resolve_resources(
    contract: OperationContract, principal: Principal, arguments: JSONObject,
    *, event: ResourceEvent | None,
) -> Resolved:
    """Resolve `{"id","revision"}` references through the store, never from client fields.

    The revision must be current and, unless `event` is None, the state of each resource the
    operation acts on must allow `event` (`check_states`). A resource
    kind's `links` (a report's question) are resolved too, at their current revision, under
    `links`. Each ref a read marks `"read": true` (`moved_refs` leaves it out).
    """
    resolved = dict(arguments)
    refs: list[JSONObject] = []
    states: dict[str, str] = {}
    for name, protocol_name in sorted(contract.protocol_preconditions.items()):
        ref = arguments[name]
        revision = _current_revision(principal, protocol_name, ref["id"], ref["revision"])
        resource = revision.resource
        states[name] = resource.state
        resolved[name] = {"id": resource.id, "revision": revision.number,
                          "digest": revision.digest, "payload": revision.payload,
                          **_links(principal, protocol_name, revision.payload)}
        refs.append({"id": resource.id, "revision": revision.number, "digest": revision.digest,
                     **({"read": True} if name in contract.reads else {})})
    found = Resolved(arguments=resolved, refs=refs, states=states)
    check_states(contract, found, event)
    return found


def check_states(contract: OperationContract, resolved: Resolved,
                 event: ResourceEvent | None) -> None:
    """The state of each resource the operation acts on, as resolved, allows `event` (None:
    the stage's own compare-and-swap decides); one it only reads is never moved."""
    if event is None:
        return
    for name, protocol_name in sorted(contract.protocol_preconditions.items()):
        if name not in contract.reads:
            transition(RESOURCE_PROTOCOLS[protocol_name], resolved.states[name], event)


def _current_revision(principal: Principal, kind: str, resource_id: Any,
                      number: int) -> Revision:
    """The named revision with its resource, in one query on the hot path; `not_found` for
    nothing of this kind in the principal's tenant, `stale_revision` for an old revision."""
    revision = loads.revision(resource_id=resource_id, tenant_id=principal.tenant_id, kind=kind,
                              number=number) \
        if isinstance(resource_id, str) and isinstance(number, int) else None
    if revision is None:
        resource = Resource.objects.filter(
            id=resource_id, tenant_id=principal.tenant_id, kind=kind).first()
        if resource is None:
            raise Denial(DenialCode.NOT_FOUND, kind="resource", id=resource_id)
        raise Denial(DenialCode.STALE_REVISION, resource_id=resource.id,
                     current_revision=resource.current_revision)
    if revision.resource.current_revision != number:
        raise Denial(DenialCode.STALE_REVISION, resource_id=revision.resource_id,
                     current_revision=revision.resource.current_revision)
    return revision


def _links(principal: Principal, kind: str, payload: JSONObject) -> JSONObject:
    """`{"links": {member: the linked resource's current revision}}` for a kind with links."""
    spec = get_runtime().resource_kinds.get(kind)
    if spec is None or not spec.links:
        return {}
    links: JSONObject = {}
    for member, linked_kind in sorted(spec.links.items()):
        linked = Resource.objects.filter(id=payload.get(member), tenant_id=principal.tenant_id,
                                         kind=linked_kind).first()
        if linked is None:
            raise Denial(DenialCode.NOT_FOUND, kind="resource", id=payload.get(member))
        revision = _current_revision(principal, linked_kind, linked.id, linked.current_revision)
        links[member] = {"id": linked.id, "revision": revision.number,
                         "digest": revision.digest, "payload": revision.payload}
    return {"links": links}


def links_moved(resolved: JSONObject, snapshot: JSONObject) -> Denial | None:
    """A linked resource (a report's question) whose revision is no longer the one the
    snapshot bound is `stale_revision`, naming it: the snapshot an operator approves holds the
    link's payload, so an edit of it since is another action."""
    for name, value in sorted(resolved.items()):
        links = value.get("links") if isinstance(value, dict) else None
        for member, link in sorted((links or {}).items()):
            bound = snapshot.get(name, {}).get("links", {}).get(member, {})
            if (bound.get("id"), bound.get("revision")) != (link["id"], link["revision"]):
                return Denial(DenialCode.STALE_REVISION, resource_id=link["id"],
                              current_revision=link["revision"], linked_from=name)
    return None


def snapshot_of(
    runtime: Runtime, contract: OperationContract, arguments: JSONObject
) -> JSONObject:
    """What the operator sees and the permit binds: no execution id, no principal
    (docs/rest-api.md#calls)."""
    return {
        "canon": CANON_VERSION,
        "operation": contract.qualified_name,
        "contract_version": contract.contract_version,
        "contract_fingerprint": contract.fingerprint,
        "arguments": arguments,
        "destination": runtime.destination(contract),
    }


def deployment_refusal(
    runtime: Runtime, contract: OperationContract, proposal: Proposal
) -> Denial | None:
    """Step 1: this deployment still runs what was proposed, or the `contract_mismatch` that
    says what moved: the contract, its handler, the destination or the policy
    (docs/design.md#outcomes)."""
    if contract.fingerprint != proposal.contract_fingerprint:
        return Denial(DenialCode.CONTRACT_MISMATCH, operation=contract.qualified_name)
    handler = runtime.handlers.get((contract.qualified_name, contract.contract_version))
    if handler is None or handler.implementation_fingerprint != \
            contract.implementation_fingerprint:
        return Denial(DenialCode.CONTRACT_MISMATCH, operation=contract.qualified_name,
                      reason="the handler changed")
    if runtime.policy_fingerprint(contract) != proposal.policy_fingerprint:
        return Denial(DenialCode.CONTRACT_MISMATCH, reason="deployment policy changed")
    if runtime.destination_fingerprint(contract) != proposal.destination_fingerprint:
        return Denial(DenialCode.CONTRACT_MISMATCH, reason="destination changed")
    return None


@dataclass(frozen=True)
class Admission:
    """Everything a stage may act on: the checked action and the grant it rests on now."""

    runtime: Runtime
    contract: OperationContract
    principal: Principal
    arguments: JSONObject  # validated, defaults materialized, normalized
    resolved: Resolved  # the arguments with each resource resolved, and the refs
    grant: CoreGrant
    canonical: bytes  # the snapshot's canonical bytes, exactly as hashed
    digest: str
    now: datetime


def admit(
    contract: OperationContract, principal: Principal, arguments: JSONObject, *,
    now: datetime, resource_event: ResourceEvent | None = None,
    expect_digest: str | None = None, lock: bool = False,
) -> Admission:
    """Run the admission pipeline over `arguments` (already `validate_arguments`-ed).

    `resource_event`: the event the state of each resource acted on must allow (a proposal's
    `propose`); None where the caller's own compare-and-swap decides it, so that every loser
    of a race hears the same answer.
    `lock=True` inside the transaction that acts on the admission (a claim): the grants are
    share-locked where they are read, so a revocation that committed first is seen and a later
    one waits. Raises the denial of the first check that fails: stale or missing resources, a
    state that does not allow the stage, authority (tool set, policy, grants), a snapshot that
    cannot be encoded, or one that no longer matches `expect_digest` (`proposal_mismatch`).
    The admission checks the contract's extension registered (`dispatch.hooks`) run in their
    order before the resources' states: what an action rests on is named before the state is.
    """
    runtime = get_runtime()
    resolved, grant = _resolve_and_authorize(runtime, contract, principal, arguments, now=now,
                                             resource_event=resource_event, lock=lock)
    try:
        canonical = canonicalize(snapshot_of(runtime, contract, resolved.arguments))
    except CanonicalizationError as exc:
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": exc.pointer, "message": exc.reason}]) from None
    snapshot_digest = digest_bytes(canonical)
    if expect_digest is not None and not hmac.compare_digest(snapshot_digest, expect_digest):
        raise Denial(DenialCode.PROPOSAL_MISMATCH, reason="the snapshot no longer matches")
    return Admission(runtime=runtime, contract=contract, principal=principal,
                     arguments=arguments, resolved=resolved, grant=grant, canonical=canonical,
                     digest=snapshot_digest, now=now)


def _resolve_and_authorize(
    runtime: Runtime, contract: OperationContract, principal: Principal, arguments: JSONObject,
    *, now: datetime, resource_event: ResourceEvent | None, lock: bool,
) -> tuple[Resolved, CoreGrant]:
    """The checks every stage runs, always: resources through the store, the extension's
    admission checks, the resources' states, and authority over the concrete values."""
    resolved = resolve_resources(contract, principal, arguments, event=None)
    checks = runtime.admission_checks.get((contract.qualified_name, contract.contract_version))
    if checks:
        context = AdmissionContext(contract=contract, principal=principal, arguments=arguments,
                                   resolved=resolved.arguments)
        for check in checks:
            refusal = check(context)
            if refusal is not None:
                raise refusal
    check_states(contract, resolved, resource_event)
    grant = check_authority(runtime, contract, principal, resolved.arguments, now, lock=lock)
    return resolved, grant


def admit_proposal(
    contract: OperationContract, principal: Principal, proposal: Proposal, *,
    now: datetime, lock: bool = False,
) -> Admission:
    """Dispatch's admission of a stored proposal, trusting the store's digest
    (docs/design.md#dispatcher): where the stored snapshot's bytes still hash to its digest and
    the deployment runs what was proposed (contract, handler, destination and policy
    fingerprints unchanged), the stored arguments, validated and canonicalized at intake in an
    immutable row, are neither validated nor canonicalized again. Resources, their revisions
    and states, and authority (grants, expiry, revocation, tool set, policy) are checked every
    time. Anything else (a linked resource edited since included) runs the whole pipeline
    against the digest (`admit`), which decides the refusal."""
    runtime = get_runtime()
    canonical = proposal.canonical.encode()
    trusted = deployment_refusal(runtime, contract, proposal) is None and hmac.compare_digest(
        digest_bytes(canonical), proposal.digest) and isinstance(proposal.arguments, dict)
    if trusted:
        arguments: JSONObject = proposal.arguments
        resolved, grant = _resolve_and_authorize(runtime, contract, principal, arguments,
                                                 now=now, resource_event=None, lock=lock)
        # The checks above read the `arguments` column; the handler and the permit token send
        # the snapshot's bytes. Trusted only where both say the same, resources and their links
        # resolved now included; anything else (a linked resource edited since, a column
        # edited in the store) runs the whole pipeline, which decides the refusal.
        if resolved.arguments == json.loads(canonical)["arguments"]:
            return Admission(runtime=runtime, contract=contract, principal=principal,
                             arguments=arguments, resolved=resolved, grant=grant,
                             canonical=canonical, digest=proposal.digest, now=now)
    return admit(contract, principal, validate_arguments(contract, proposal.arguments),
                 now=now, expect_digest=proposal.digest, lock=lock)
