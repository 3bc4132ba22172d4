"""`check_workflow`: the static judgment Γ;Δ;C ⊢ e : τ ! ε ▷ Δ' of docs/workflows.md#typing-rules
over the IR.

The checker walks the steps in order, threading the environment (`env.Env`): ordinary values
(Γ), owned handles and affine permits and decisions (Δ), and per-resource protocol states. C is
the declared authority, optionally intersected with deployment grants; ε is bounded by the
workflow's declared effect ceiling. It never raises for a well-formed IR: every refusal is a
`Diagnostic` with a stable code, and a workflow with none is issued a `CheckedWorkflow`.

Rules live in `actions` (propose, request_approval, dispatch, resources, agents) and `control`
(if, match, loop, try, parallel, race); this module handles inputs and sequencing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from protocols.contracts import ContractRegistry
from protocols.denials import DiagnosticCode
from protocols.grants import Grant
from protocols.lifecycle import RESOURCE_PROTOCOLS, ResourceProtocol
from protocols.workflow import actions, concurrency, control, data_steps
from protocols.workflow.checked import CheckedWorkflow, _issue
from protocols.workflow.context import Ctx
from protocols.workflow.diagnostics import Diagnostics
from protocols.workflow.env import Binding, DataT, Env, HandleT, PoisonT, Prov, Resource
from protocols.workflow.ir import (
    AgentCall,
    Approve,
    Block,
    Create,
    Dispatch,
    Edit,
    If,
    Input,
    Let,
    Loop,
    Match,
    Parallel,
    Propose,
    Race,
    Receive,
    RequestApproval,
    Step,
    Try,
    Workflow,
)

D = DiagnosticCode
TRUSTED_KINDS = {"permit", "decision", "proposal", "approval", "outcome"}

_ACTIONS: dict[type[Any], Callable[[Ctx, Env, Any], None]] = {
    Propose: actions.propose, RequestApproval: actions.request_approval,
    Approve: actions.approve, Dispatch: actions.dispatch, Create: data_steps.create,
    Edit: data_steps.edit, Let: data_steps.let, Receive: data_steps.receive,
    AgentCall: data_steps.agent,
}
_CONTROL: dict[type[Any], Callable[[Ctx, Env, Any, control.Run], Env]] = {
    If: control.check_if, Match: control.check_match, Loop: control.check_loop,
    Try: control.check_try, Parallel: concurrency.check_parallel,
    Race: concurrency.check_parallel,
}


def check_workflow(workflow: Workflow, registry: ContractRegistry, *,
                   grants: Iterable[Grant] | None = None,
                   kinds: Mapping[str, ResourceProtocol] | None = None,
                   ) -> CheckedWorkflow | Diagnostics:
    """Check `workflow` against `registry`; `grants`, if given, further limit authority;
    `kinds`, the resource kinds' tables by kind (by default those registered with
    `resource_protocol_register`), the only tables the rules read.

    Returns a `CheckedWorkflow` (effects ε and the fingerprints of the contracts it relies on)
    or `Diagnostics`, ordered by position. Pure: no clock, no I/O, no randomness.
    """
    ctx = Ctx(registry, workflow.effects, workflow.authority,
              None if grants is None else tuple(grants),
              dict(RESOURCE_PROTOCOLS) if kinds is None else kinds)
    env = Env()
    for item in workflow.inputs:
        _declare(ctx, env, item)

    def run(block: Block, start: Env) -> Env:
        current = start
        for step in block:
            current = _step(ctx, current, step, run)
            for collector in ctx.snapshots:
                collector.append(current.copy())
        return current

    run(workflow.steps, env)
    if ctx.diagnostics:
        return Diagnostics.of(ctx.diagnostics)
    return _issue(workflow, frozenset(ctx.effects), ctx.contracts)


def _step(ctx: Ctx, env: Env, step: Step, run: control.Run) -> Env:
    rule = _ACTIONS.get(type(step))
    if rule is not None:
        rule(ctx, env, step)
        return env
    return _CONTROL[type(step)](ctx, env, step, run)


def _declare(ctx: Ctx, env: Env, item: Input) -> None:
    """Inputs: handles come from the trusted store; data from the host; authority never."""
    if item.kind in ("bool", "json"):
        env.bind(Binding(item.name, ctx.fresh(item.span), DataT(item.kind), Prov.HOST, item.span))
        return
    if item.kind in TRUSTED_KINDS:
        ctx.report(D.FORGED_VALUE, f"input `{item.name}`: a {item.kind} cannot be passed in",
                   item.span, "only request_approval (through a match on its decision) mints "
                   "permits; take a handle input and propose inside the workflow",
                   required="bool, json or a resource handle", actual=item.kind)
    elif item.kind == "handle":
        protocol = ctx.kinds.get(item.resource or "")
        if protocol is None:
            ctx.report(D.UNKNOWN_OPERATION, f"input `{item.name}`: no resource protocol named "
                       f"`{item.resource}`", item.span,
                       f"use one of: {', '.join(sorted(ctx.kinds))}",
                       required="a declared resource kind", actual=str(item.resource))
        elif (state := item.state or str(protocol.initial)) not in (
                states := sorted(str(s) for s in protocol.states)):
            ctx.report(D.MALFORMED_WORKFLOW, f"input `{item.name}`: `{state}` is not a state of "
                       f"{protocol.name}", item.span, f"use one of: {', '.join(states)}",
                       required=" | ".join(states), actual=state)
        else:
            rid = f"input:{item.name}"
            env.resources[rid] = Resource(rid, item.name, protocol.name, state, 1, None,
                                          item.payload)
            env.bind(Binding(item.name, ctx.fresh(item.span), HandleT(rid, 1, protocol.name),
                             Prov.TRUSTED, item.span))
            return
    else:
        ctx.report(D.MALFORMED_WORKFLOW, f"input `{item.name}`: unknown type `{item.kind}`",
                   item.span, "declare bool, json or {handle: <resource kind>}",
                   required="bool | json | handle", actual=item.kind)
    env.bind(Binding(item.name, ctx.fresh(item.span), PoisonT(), Prov.TRUSTED, item.span))
