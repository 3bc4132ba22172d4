"""Typing rules of resource and data steps: create, edit, let, receive and agent calls.

Resources come only from `create` (a new resource, revision 1) or trusted inputs; `edit` makes
a new revision and consumes the old handle (docs/design.md#resources). `let` moves affine values.
Host messages and agent outputs are data whatever they contain (docs/workflows.md#typing-rules,
docs/design.md#canonical-encoding); an agent counts with every tool in its set
(docs/design.md#tool-sets).
"""

from __future__ import annotations

from collections.abc import Iterable

from protocols.contracts import Effect
from protocols.denials import DiagnosticCode
from protocols.grants import Grant, Scope, scope_as_json, widenings
from protocols.lifecycle import ResourceEvent
from protocols.workflow import evidence
from protocols.workflow.authority import check_authority
from protocols.workflow.context import WRITES, Ctx, bind
from protocols.workflow.diagnostics import Note, short
from protocols.workflow.env import (
    AFFINE,
    Binding,
    DataT,
    Env,
    HandleT,
    PoisonT,
    Prov,
    Resource,
    describe,
)
from protocols.workflow.ir import (
    AgentCall,
    Create,
    Delegate,
    Edit,
    Expr,
    Let,
    Literal,
    Receive,
    Ref,
)
from protocols.workflow.resources import check_state, plain_state

D = DiagnosticCode


def create(ctx: Ctx, env: Env, step: Create) -> None:
    """create kind(payload): a new resource in its protocol's initial state, revision 1."""
    protocol = ctx.kinds.get(step.kind)
    payload = _payload(ctx, env, step.payload)
    if protocol is None:
        ctx.report(D.UNKNOWN_OPERATION, f"no resource protocol named `{step.kind}`", step.span,
                   f"use one of: {', '.join(sorted(ctx.kinds))}",
                   required="a declared resource kind", actual=step.kind)
        bind(ctx, env, step.bind, PoisonT(), Prov.TRUSTED, step.span)
        return
    rid = f"r:{step.span.path}"
    env.resources[rid] = Resource(rid, step.bind or step.kind, protocol.name,
                                  str(protocol.initial), 1, step.span, payload)
    handle = HandleT(rid, 1, protocol.name)
    evidence.written(env, handle, step.payload, step.payload.span)
    bind(ctx, env, step.bind, handle, Prov.TRUSTED, step.span)


def _payload(ctx: Ctx, env: Env, expr: Expr) -> object:
    if isinstance(expr, Literal):
        return expr.value
    value = ctx.resolve(env, expr)
    if not isinstance(value.type, DataT | PoisonT):
        ctx.report(D.TYPE_MISMATCH, f"`{expr}` is not a payload", expr.span,
                   "pass JSON data as the payload", required="JSON data",
                   actual=describe(value.type))
    return None


def edit(ctx: Ctx, env: Env, step: Edit) -> None:
    """edit(h, payload): a new revision in the initial state; the old handle is consumed."""
    value = ctx.expect(env, step.handle, HandleT, "a resource handle", "a live resource handle")
    payload = _payload(ctx, env, step.payload)
    name = step.bind or (step.handle.name if not isinstance(step.handle, Literal) else None)
    if value is None or value.binding is None or not isinstance(value.type, HandleT):
        bind(ctx, env, name, PoisonT(), Prov.TRUSTED, step.span)
        return
    resource = env.resources[value.type.rid]
    revision = resource.revision + 1
    env.consume(value.binding.name, D.CONSUMED_PERMIT,
                f"replaced by the edit at {short(step.span)}; use `{name}` (revision {revision})",
                step.span)
    state = resource.state
    if check_state(ctx, resource, ResourceEvent.EDIT, step.handle.span, "edit"):
        protocol = ctx.kinds[resource.protocol]
        state = str(protocol.transitions[(plain_state(resource), ResourceEvent.EDIT)])
    env.set_state(resource.rid, state, step.span, revision=revision, payload=payload,
                  keep_payload=False)
    handle = HandleT(resource.rid, revision, resource.protocol)
    evidence.written(env, handle, step.payload, step.payload.span)
    bind(ctx, env, name, handle, Prov.TRUSTED, step.span)


def let(ctx: Ctx, env: Env, step: Let) -> None:
    """let x = value: copies data, moves affine values (the source is consumed)."""
    value = ctx.resolve(env, step.value)
    whole = isinstance(step.value, Ref) and not step.value.fields
    if value.binding is not None and isinstance(value.type, AFFINE) and whole:
        env.consume(value.binding.name, D.CONSUMED_PERMIT,
                    f"moved into `{step.bind}` at {short(step.span)}", step.span)
        env.bind(Binding(step.bind, value.binding.vid, value.type, value.prov, step.span))
        return
    vid = value.binding.vid if value.binding is not None and whole else None
    made = bind(ctx, env, step.bind, value.type, value.prov, step.span, vid)
    if vid is None:  # a field of a value: the facts of that field (an attestation's id)
        evidence.carry(env, step.value, made)


def receive(ctx: Ctx, env: Env, step: Receive) -> None:
    """A host message: untrusted JSON whatever it claims to be
    (docs/design.md#canonical-encoding)."""
    bind(ctx, env, step.bind, DataT("json"), Prov.HOST, step.span)


def agent(ctx: Ctx, env: Env, step: AgentCall) -> None:
    """An agent may pick any tool in its set: all their effects and authority count
    (docs/design.md#tool-sets)."""
    effects: set[str] = set()
    for tool in step.tools:
        contract = ctx.contract(tool, step.span)
        if contract is None:
            continue
        effects |= set(contract.possible_effects)
        if contract.approval_requirement is not None:
            effects.add(Effect.HUMAN.value)
        check_authority(ctx, contract, {}, step.span, f"agent tool {tool}")
        writes = sorted(WRITES & set(contract.possible_effects))
        if ctx.races and writes:
            ctx.report(D.PROTECTED_RACE, f"agent `{step.agent}` may call the protected write "
                       f"{tool} inside a race", step.span,
                       "remove write tools from agents inside a race, or move the agent out",
                       required="read or model tools only inside race",
                       actual=f"{tool}: {', '.join(writes)}",
                       notes=[Note("the race", ctx.races[-1])])
    ctx.charge(effects, step.span, f"agent `{step.agent}` (tools: {', '.join(step.tools)})")
    if step.delegate is not None:
        _delegation(ctx, step, step.delegate)
    for name, expr in step.inputs:
        value = ctx.resolve(env, expr)
        if not isinstance(value.type, DataT | PoisonT):
            ctx.report(D.TYPE_MISMATCH, f"agent input `{name}` must be data", expr.span,
                       "agents receive data; permits, decisions and handles stay with the "
                       "workflow", required="data", actual=describe(value.type))
    made = bind(ctx, env, step.bind, DataT(step.returns), Prov.MODEL, step.span)
    evidence.mix(env, [expr for _, expr in step.inputs], made)  # receipts only: model output


def _delegation(ctx: Ctx, step: AgentCall, delegate: Delegate) -> None:
    """A bounded delegation (docs/design.md#delegation) is only narrower: what the checker can see
    of a widening is reported here (AGL-E001), the rest is the runtime's `delegation_widens`.

    The child grant is derived from ONE grant of the running principal, so it must lie within
    one declared `authority:` entry (and, when the deployment's grants were passed, within one
    grant that is not revoked); every tool of the agent must be among the delegated operations.
    """
    for operation in delegate.operations:
        ctx.contract(operation, delegate.span)  # AGL-E009 for an unknown one
    for tool in step.tools:
        if tool not in delegate.operations:
            ctx.report(D.MISSING_AUTHORITY, f"agent tool {tool} is not delegated to "
                       f"`{step.agent}`", step.span,
                       f"add {tool} to `delegate.operations`, or drop it from `tools`",
                       required=f"{tool} among the delegated operations",
                       actual=", ".join(delegate.operations))
    child = _as_grant("delegate", delegate.operations, delegate.scope)
    declared = [_as_grant(a.span.path, a.operations, a.scope) for a in ctx.authority]
    if not any(not widenings(child, parent) for parent in declared):
        closest = next((widenings(child, p) for p in declared
                        if set(p.operations) & set(child.operations) or "*" in p.operations),
                       None)
        ctx.report(D.MISSING_AUTHORITY, f"the delegation to `{step.agent}` widens the "
                   "authority the workflow declares", delegate.span,
                   "delegate only what one `authority:` entry covers: its operations, and for "
                   "each scope key a subset of its values (grants/{id}/delegate/ semantics)",
                   required=f"one declared authority entry covering "
                            f"{', '.join(delegate.operations)} over {_flow(delegate.scope)}",
                   actual="nothing declared" if not declared else (
                       "wider in " + "; ".join(f"{part} {_text(extra)}"
                                               for part, extra in sorted(closest.items()))
                       if closest else "no entry for these operations"))
    if ctx.grants is not None and not any(
            g.revoked_at is None and not widenings(
                child, _as_grant(g.id, g.operations, g.scope)) for g in ctx.grants):
        ctx.report(D.MISSING_AUTHORITY, f"no live deployment grant covers the delegation to "
                   f"`{step.agent}`", delegate.span, "ask an admin for a grant that covers it",
                   required=f"a grant covering {', '.join(delegate.operations)} over "
                            f"{_flow(delegate.scope)}",
                   actual="no live deployment grant covers it")


def _as_grant(name: str, operations: Iterable[str], scope: Scope) -> Grant:
    """An unbounded grant over `operations` and `scope`: narrowing without a clock."""
    return Grant(id=name, issuer="workflow", subject="workflow", operations=frozenset(operations),
                 scope=scope, not_before=None, expires_at=None, revoked_at=None, parent_id=None)


def _flow(scope: Scope) -> str:
    return _text(scope_as_json(scope))


def _text(value: object) -> str:
    """JSON-ish text for a message: `{mailbox: [a@x]}`, `[email.send]`."""
    return str(value).replace("'", "")
