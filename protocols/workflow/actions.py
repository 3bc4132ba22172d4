"""Typing rules of the exact-action flow: propose, request approval, approve, dispatch.

Each rule reads and updates Δ in place (docs/workflows.md#typing-rules: Γ;Δ;C ⊢ e : τ ! ε ▷ Δ'): it
checks inputs, authority kinds, effects and protocol states, consumes affine values and binds its
result.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from protocols.contracts import Effect, OperationContract
from protocols.denials import DiagnosticCode
from protocols.lifecycle import Outcome, ResourceEvent, sources
from protocols.workflow import evidence
from protocols.workflow.authority import UNKNOWN, check_authority
from protocols.workflow.context import APPROVAL_HELP, WRITES, Ctx, bind, repeatable
from protocols.workflow.diagnostics import Note, short
from protocols.workflow.env import (
    Binding,
    DataT,
    DecisionT,
    Env,
    HandleT,
    OutcomeT,
    PermitT,
    PoisonT,
    ProposalT,
    Prov,
    Tagged,
    article,
    describe,
)
from protocols.workflow.ir import Approve, Dispatch, Expr, Literal, Propose, RequestApproval, Span
from protocols.workflow.resources import (
    check_settled,
    check_state,
    plain_state,
    schema_problems,
)

D = DiagnosticCode
OUTCOME_EVENTS = ((Outcome.COMPLETED.value, ResourceEvent.COMPLETE),
                  (Outcome.FAILED_NO_EFFECT.value, ResourceEvent.FAIL_NO_EFFECT),
                  (Outcome.UNKNOWN.value, ResourceEvent.UNCERTAIN))


def propose(ctx: Ctx, env: Env, step: Propose) -> None:
    """propose op(args): deterministic, no effect; moves referenced resources to Proposed."""
    contract = ctx.contract(step.operation, step.span)
    missing = [] if contract is None else sorted(
        set(contract.protocol_preconditions.values()) - set(ctx.kinds))
    if missing:
        ctx.report(D.UNKNOWN_OPERATION, f"{step.operation} names resource kinds the checker "
                   f"was not given: {', '.join(missing)}", step.span,
                   "check against the kinds its contract was registered with",
                   required="declared resource kinds", actual=", ".join(missing))
    if contract is None or missing:
        bind(ctx, env, step.bind, PoisonT(), Prov.TRUSTED, step.span)
        return
    for problem, pointer, where in schema_problems(contract, step.args):
        ctx.report(D.INVALID_ARGUMENTS, f"{contract.qualified_name}: {problem}",
                   where or step.span,
                   "pass exactly the arguments of the contract's input schema",
                   required=f"arguments valid against {contract.qualified_name}'s input type",
                   actual=pointer)
    need = contract.attestation
    attested = evidence.check_publication(ctx, env, contract, step)
    known: dict[str, object] = {}
    found = _Snapshot()
    for arg, expr in step.args:
        protocol = contract.protocol_preconditions.get(arg)
        mode = "read" if arg in contract.reads else "assume" if (
            need is not None and arg == need.report and not attested) else "move"
        if protocol:
            with ctx.shared_reads(mode == "read" and contract.shareable):
                known[arg] = _resource_arg(ctx, env, arg, expr, protocol, found, step, mode)
        elif need is None or arg != need.argument:  # the attestation: check_publication
            known[arg] = _data_arg(ctx, env, arg, expr)
    if need is not None and need.report in found.handles:
        evidence.check_citations(ctx, env, dict(step.args)[need.report],
                                 found.handles[need.report])
    check_authority(ctx, contract, known, step.span, f"propose {contract.qualified_name}")
    handles = {arg: (h.rid, h.revision) for arg, h in found.handles.items()}
    bind(ctx, env, step.bind, ProposalT(
        contract.qualified_name, tuple(found.resources), tuple(found.reads),
        evidence.plan(contract, dict(step.args), handles, step.span)), Prov.TRUSTED, step.span)


@dataclass
class _Snapshot:
    """What a proposal snapshots: (resource, revision), those it only reads, handle by arg."""

    resources: list[tuple[str, int]] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    handles: dict[str, HandleT] = field(default_factory=dict)


def _resource_arg(ctx: Ctx, env: Env, arg: str, expr: Expr, protocol_name: str,
                  found: _Snapshot, step: Propose, mode: str) -> object:
    """A resource argument: `move` takes the propose event; `read` needs only a known state
    (contract `reads`); `assume` is a publication whose attestation was refused: its state is
    what the attestation would have made it, unchecked (the dispatcher checks the attestation
    first, docs/design.md#evidence)."""
    event = ResourceEvent.PROPOSE
    protocol = ctx.kinds[protocol_name]
    allowed = ", ".join(sorted(str(s) for s in sources(protocol, event)))
    value = ctx.expect(env, expr, HandleT, "a resource handle",
                       f"{article(protocol_name)} {protocol_name} handle in state {allowed}")
    if value is None or not isinstance(value.type, HandleT):
        return UNKNOWN
    if value.type.protocol != protocol_name:
        ctx.report(D.TYPE_MISMATCH, f"`{expr}` is a handle of {value.type.protocol}",
                   expr.span, f"pass a handle of {protocol_name}",
                   required=f"a handle of {protocol_name}",
                   actual=f"a handle of {value.type.protocol}")
        return UNKNOWN
    resource = env.resources[value.type.rid]
    found.handles[arg] = value.type
    if mode == "read":
        check_settled(ctx, resource, expr.span, f"read `{expr}`")
        found.reads.append(resource.rid)
    elif mode == "assume":
        attested = next((t for (_, e), t in protocol.transitions.items()
                         if e == ResourceEvent.ATTEST), None)
        target = protocol.transitions.get((attested, event)) if attested else None
        if target is not None:
            env.set_state(resource.rid, str(target), step.span)
    elif check_state(ctx, resource, event, expr.span, f"propose with `{expr}`"):
        target = protocol.transitions[(plain_state(resource), event)]
        env.set_state(resource.rid, str(target), step.span)
    if (resource.rid, resource.revision) not in found.resources:
        found.resources.append((resource.rid, resource.revision))
    return UNKNOWN if resource.payload is None else {"payload": resource.payload}


def _data_arg(ctx: Ctx, env: Env, arg: str, expr: Expr) -> object:
    value = ctx.resolve(env, expr)
    if isinstance(value.type, PoisonT):
        return UNKNOWN
    if not isinstance(value.type, DataT):
        ctx.report(D.TYPE_MISMATCH, f"argument `{arg}` takes data", expr.span,
                   "pass data here; resource arguments are those the contract's protocol "
                   "preconditions name", required="data", actual=describe(value.type))
        return UNKNOWN
    return expr.value if isinstance(expr, Literal) else UNKNOWN


def _proposal(ctx: Ctx, env: Env, expr: Expr) -> tuple[Binding, ProposalT] | None:
    """The proposal `expr` names; its one approval and dispatch are owned
    (docs/workflows.md#typing-rules)."""
    value = ctx.expect(env, expr, ProposalT, "a proposal", "a proposal made by `propose`")
    if value is None or value.binding is None or not isinstance(value.type, ProposalT):
        return None
    ctx.touch(f"p:{value.binding.vid}", f"`{value.binding.name}`", expr.span)
    return value.binding, value.type


def _snapshot_ok(ctx: Ctx, env: Env, proposal: ProposalT, event: ResourceEvent,
                 span: Span, what: str) -> bool:
    """Every resource the proposal snapshots is at that revision and allows `event`."""
    ok = True
    shareable = ctx.registry.resolve(proposal.op).shareable
    for rid, revision in proposal.resources:
        resource = env.resources[rid]
        read = rid in proposal.reads  # only its revision matters: it is never moved
        ctx.touch(f"r:{rid}", f"`{resource.label}`", span, shared=read and shareable)
        if resource.revision != revision:
            ctx.report(D.INVALID_PROTOCOL_STATE,
                       f"{what}: the proposal snapshots revision {revision} of "
                       f"`{resource.label}`, which was edited since", span,
                       "propose again against the current revision and request a new approval "
                       "(docs/design.md#resources: editing cannot mutate an authorized snapshot)",
                       required=f"revision {revision}",
                       actual=f"revision {resource.revision} ({resource.state})",
                       notes=[] if resource.changed_at is None else
                       [Note("edited here", resource.changed_at)])
            ok = False
        elif not read and not check_state(ctx, resource, event, span, what):
            ok = False
    return ok


def request_approval(ctx: Ctx, env: Env, step: RequestApproval) -> None:
    """request_approval(p): contributes `human`; the decision is affine and must be matched."""
    ctx.charge({Effect.HUMAN.value}, step.span, "request_approval")
    found = _proposal(ctx, env, step.proposal)
    if found is None:
        bind(ctx, env, step.bind, PoisonT(), Prov.TRUSTED, step.span)
        return
    binding, proposal = found
    contract = ctx.registry.resolve(proposal.op)
    required = contract.approval_requirement
    if step.role is not None and required is not None and step.role != required.role:
        ctx.report(D.UNBOUND_APPROVAL, f"{proposal.op} must be approved by `{required.role}`",
                   step.span, f"request the approval from role `{required.role}`",
                   required=f"role {required.role}", actual=f"role {step.role}")
    mark = f"requested:{binding.vid}"
    if mark in env.marks:
        ctx.report(D.CONSUMED_PERMIT, f"the approval of `{binding.name}` was already requested",
                   step.span, "a proposal has one approval; propose again to ask again",
                   required="a proposal without an approval request",
                   actual=f"approval requested at {short(env.marks[mark])}",
                   notes=[Note("requested here", env.marks[mark])])
        bind(ctx, env, step.bind, PoisonT(), Prov.TRUSTED, step.span)
        return
    env.marks[mark] = step.span
    vid = ctx.fresh(step.span)
    if _snapshot_ok(ctx, env, proposal, ResourceEvent.GRANT, step.proposal.span,
                    "request_approval"):
        for rid in _moved(proposal):
            _tag(ctx, env, rid, vid, step.bind or "the decision", step.span, (
                ("granted", ResourceEvent.GRANT), ("denied", ResourceEvent.DENY)))
    bind(ctx, env, step.bind, DecisionT(binding.vid, proposal.op), Prov.TRUSTED, step.span, vid)


def _tag(ctx: Ctx, env: Env, rid: str, vid: str, name: str, span: Span,
         events: tuple[tuple[str, ResourceEvent], ...]) -> None:
    resource = env.resources[rid]
    protocol = ctx.kinds[resource.protocol]
    state = plain_state(resource)  # callers checked it is a plain state
    by_tag = tuple((tag, str(protocol.transitions[(state, event)])) for tag, event in events)
    distinct = {target for _, target in by_tag}
    env.set_state(rid, distinct.pop() if len(distinct) == 1 else Tagged(vid, name, by_tag),
                  span)


def approve(ctx: Ctx, env: Env, step: Approve) -> None:
    """Legacy `approve`: a plain Bool (docs/workflows.md#typing-rules); it never narrows a resource
    or mints a permit."""
    ctx.charge({Effect.HUMAN.value}, step.span, "approve")
    bind(ctx, env, step.bind, DataT("bool"), Prov.TRUSTED, step.span)


def dispatch(ctx: Ctx, env: Env, step: Dispatch) -> None:
    """dispatch(p, permit): needs the permit of exactly p, Authorized resources, no race."""
    found = _proposal(ctx, env, step.proposal)
    outcome_vid = ctx.fresh(step.span)
    if found is None:
        bind(ctx, env, step.bind, PoisonT(), Prov.TRUSTED, step.span)
        return
    binding, proposal = found
    contract = ctx.registry.resolve(proposal.op)
    ctx.charge(contract.possible_effects, step.span, f"dispatch of {proposal.op}")
    writes = sorted(WRITES & set(contract.possible_effects))
    if ctx.races and writes:
        ctx.report(D.PROTECTED_RACE, f"protected write {proposal.op} inside a race", step.span,
                   "move the dispatch out of the race: cancelling a losing branch cannot "
                   "retract an effect it already performed (docs/design.md#budgets)",
                   required="no external write inside race", actual=", ".join(writes),
                   notes=[Note("the race", ctx.races[-1])])
    _check_retry(ctx, contract, step)
    mark = f"dispatched:{binding.vid}"
    if mark in env.marks and not repeatable(contract):
        ctx.report(D.UNSAFE_RETRY, f"`{binding.name}` was already dispatched", step.span,
                   "a second dispatch is a blind retry: use `retry:` on the first dispatch if "
                   "the contract allows it, else let an admin reconcile the outcome "
                   "(docs/design.md#outcomes)",
                   required="a proposal not yet dispatched",
                   actual=f"dispatched at {short(env.marks[mark])}, "
                          f"idempotency {contract.idempotency_contract.value}",
                   notes=[Note("first dispatch", env.marks[mark])])
        bind(ctx, env, step.bind, PoisonT(), Prov.TRUSTED, step.span, outcome_vid)
        return
    env.marks.setdefault(mark, step.span)
    if _permit_ok(ctx, env, step, binding, contract) and _snapshot_ok(
            ctx, env, proposal, ResourceEvent.CLAIM, step.proposal.span, "dispatch"):
        for rid in _moved(proposal):
            resource = env.resources[rid]
            protocol = ctx.kinds[resource.protocol]
            claimed = protocol.transitions[(plain_state(resource), ResourceEvent.CLAIM)]
            env.set_state(rid, str(claimed), step.span)
            _tag(ctx, env, rid, outcome_vid, step.bind or "the outcome", step.span, OUTCOME_EVENTS)
    plan = proposal.plan if proposal.plan is None else replace(proposal.plan, at=step.span)
    bind(ctx, env, step.bind, OutcomeT(proposal.op, plan), Prov.TRUSTED, step.span, outcome_vid)


def _moved(proposal: ProposalT) -> list[str]:
    """The resources the proposal's decision, claim and outcome move: all but its reads."""
    return [rid for rid, _revision in proposal.resources if rid not in proposal.reads]


def _check_retry(ctx: Ctx, contract: OperationContract, step: Dispatch) -> None:
    if step.retry is None or step.retry <= 1:
        return
    limit = contract.scheduling_contract.max_attempts
    if not contract.retry_safe or step.retry > limit:
        ctx.report(D.UNSAFE_RETRY, f"{contract.qualified_name} may not be attempted "
                   f"{step.retry} times", step.span,
                   "an uncertain non-idempotent write needs human resolution, not a retry; "
                   f"allow at most {limit if contract.retry_safe else 1} attempt(s)",
                   required=f"at most {limit if contract.retry_safe else 1} attempt(s) "
                            f"(idempotency {contract.idempotency_contract.value})",
                   actual=f"retry: {step.retry}")


def _permit_ok(ctx: Ctx, env: Env, step: Dispatch, proposal: Binding,
               contract: OperationContract) -> bool:
    if step.permit is None:
        if contract.approval_requirement is None:
            return True
        notes = [Note(f"the `if` on `{name}` does not authorize: a boolean never narrows a "
                      "resource to authorized", span) for name, span in ctx.conditions]
        ctx.report(D.UNBOUND_APPROVAL, f"dispatch of {contract.qualified_name} without a permit",
                   step.span, APPROVAL_HELP,
                   required=f"a permit bound to `{proposal.name}`", actual="no permit",
                   notes=notes)
        return False
    value = ctx.expect(env, step.permit, PermitT, "a permit",
                       f"a permit bound to `{proposal.name}`")
    if value is None or value.binding is None or not isinstance(value.type, PermitT):
        return False
    permit = value.binding
    env.consume(permit.name, D.CONSUMED_PERMIT,
                f"consumed by the dispatch at {short(step.span)}", step.span)
    if value.type.proposal != proposal.vid:
        ctx.report(D.UNBOUND_APPROVAL, f"`{permit.name}` approves another proposal",
                   step.permit.span, "dispatch the proposal the permit was granted for, or "
                   "request an approval of this one", required=f"a permit for `{proposal.name}`",
                   actual=f"a permit for another proposal of {value.type.op}",
                   notes=[Note("permit minted here", permit.origin)])
        return False
    return True
