"""Admission (DESIGN §5 steps 1-4, spec §7): what every stage checks before it acts.

`admit` is the one pipeline that proposal, decision, dispatch and retry run: the contract's
arguments validated with defaults materialized, resource handles resolved through the store
(never from client fields), authority decided over the concrete values, and the canonical
snapshot the operator sees and the permit binds, with its digest. A stage that acts on an
existing proposal passes its digest: a snapshot that no longer matches is refused.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from dispatch.models import Principal, Proposal, Resource, Revision
from dispatch.runtime import Runtime, get_runtime
from dispatch.services.authority import check_authority
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
from protocols.lifecycle import RESOURCE_PROTOCOLS, ResourceEvent, ResourceState, transition


class Stage(StrEnum):
    """Where admission runs; it decides which resource event the state must allow."""

    PROPOSE = "propose"
    DECIDE = "decide"
    DISPATCH = "dispatch"
    RETRY = "retry"


#: The event a resource's state must allow at each stage (None: the stage's own
#: compare-and-swap decides it, so that every loser of a race hears the same answer).
_STAGE_EVENTS: dict[Stage, ResourceEvent | None] = {
    Stage.PROPOSE: ResourceEvent.PROPOSE,
    Stage.DECIDE: None,
    Stage.DISPATCH: None,
    Stage.RETRY: None,
}


@dataclass(frozen=True)
class Resolved:
    """Arguments with every resource reference resolved through the store."""

    arguments: dict[str, Any]
    refs: list[dict[str, Any]]


def validate_arguments(contract: OperationContract, arguments: Any) -> dict[str, Any]:
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
    contract: OperationContract, principal: Principal, arguments: dict[str, Any],
    *, event: ResourceEvent | None,
) -> Resolved:
    """Resolve `{"id","revision"}` references through the store, never from client fields.

    The revision must be current and, unless `event` is None, the state must allow `event`.
    """
    resolved = dict(arguments)
    refs: list[dict[str, Any]] = []
    for name, protocol_name in sorted(contract.protocol_preconditions.items()):
        ref = arguments[name]
        # The named revision with its resource, in one query on the hot path.
        revision = Revision.objects.select_related("resource").filter(
            resource_id=ref["id"], resource__tenant_id=principal.tenant_id,
            resource__kind=protocol_name, number=ref["revision"]).first()
        if revision is None:
            resource = Resource.objects.filter(
                id=ref["id"], tenant_id=principal.tenant_id, kind=protocol_name).first()
            if resource is None:
                raise Denial(DenialCode.NOT_FOUND, kind="resource", id=ref["id"])
            raise Denial(DenialCode.STALE_REVISION, resource_id=resource.id,
                         current_revision=resource.current_revision)
        resource = revision.resource
        if resource.current_revision != ref["revision"]:
            raise Denial(DenialCode.STALE_REVISION, resource_id=resource.id,
                         current_revision=resource.current_revision)
        if event is not None:
            transition(RESOURCE_PROTOCOLS[protocol_name], ResourceState(resource.state), event)
        resolved[name] = {"id": resource.id, "revision": revision.number,
                          "digest": revision.digest, "payload": revision.payload}
        refs.append({"id": resource.id, "revision": revision.number, "digest": revision.digest})
    return Resolved(arguments=resolved, refs=refs)


def snapshot_of(
    runtime: Runtime, contract: OperationContract, arguments: dict[str, Any]
) -> dict[str, Any]:
    """What the operator sees and the permit binds: no execution id, no principal (DESIGN §7)."""
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
    says what moved: the contract, its handler, the destination or the policy (spec §8)."""
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
    arguments: dict[str, Any]  # validated, defaults materialized, normalized
    resolved: Resolved  # the arguments with each resource resolved, and the refs
    grant: CoreGrant
    canonical: bytes  # the snapshot's canonical bytes, exactly as hashed
    digest: str
    now: datetime


def admit(
    contract: OperationContract, principal: Principal, arguments: dict[str, Any], *,
    now: datetime, stage: Stage, expect_digest: str | None = None, lock: bool = False,
) -> Admission:
    """Run the admission pipeline over `arguments` (already `validate_arguments`-ed).

    `lock=True` inside the transaction that acts on the admission (a claim): the grants are
    share-locked where they are read, so a revocation that committed first is seen and a later
    one waits. Raises the denial of the first check that fails: stale or missing resources, a
    state that does not allow the stage, authority (tool set, policy, grants), a snapshot that
    cannot be encoded, or one that no longer matches `expect_digest` (`proposal_mismatch`).
    """
    runtime = get_runtime()
    resolved = resolve_resources(contract, principal, arguments, event=_STAGE_EVENTS[stage])
    grant = check_authority(runtime, contract, principal, resolved.arguments, now, lock=lock)
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
