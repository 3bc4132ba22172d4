"""Typing rules of control flow: if, match, loops, try/catch, parallel and race
(docs/workflows.md#typing-rules).

- if/else and match: each path starts from the same Δ; at the join only what every path agrees
  on stays available (`env.join`). A Bool condition narrows nothing; only a match on a decision
  or dispatch outcome narrows the resources tagged by it, arm by arm.
- loop: the body must leave every outer resource and affine value as it found them (a permit
  consumed by the body cannot reappear on a later iteration; changing states are rejected).
- try: the catch starts from what may hold at any failure point in the body, so it cannot
  resurrect consumed handles; a fallback is data and never stands in for a permit or handle.

Parallel branches and races are in `concurrency`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from protocols.denials import DiagnosticCode
from protocols.lifecycle import Outcome
from protocols.workflow import evidence
from protocols.workflow.context import Ctx, repeatable
from protocols.workflow.diagnostics import Note, short
from protocols.workflow.env import (
    AFFINE,
    Binding,
    Conflicted,
    DataT,
    DecisionT,
    Env,
    Gone,
    HandleT,
    OutcomeT,
    PermitT,
    PoisonT,
    ProposalT,
    Prov,
    State,
    Tagged,
    VType,
    describe,
    is_outer,
    join,
    joined_vid,
    resource_text,
    same_state,
)
from protocols.workflow.facts import VERDICTS, join_evidence
from protocols.workflow.ir import Block, If, Loop, Match, Span, Try

D = DiagnosticCode
Run = Callable[[Block, Env], Env]


def check_if(ctx: Ctx, env: Env, step: If, run: Run) -> Env:
    cond = ctx.resolve(env, step.condition)
    if not isinstance(cond.type, PoisonT) and cond.type != DataT("bool"):
        hint = ("match on the decision: `Granted` yields the permit, `Denied` the reason"
                if isinstance(cond.type, DecisionT | OutcomeT) else "pass a bool")
        ctx.report(D.TYPE_MISMATCH, f"`if` needs a bool, `{step.condition}` is "
                   f"{describe(cond.type)}", step.condition.span, hint,
                   required="a bool", actual=describe(cond.type))
    ctx.conditions.append((str(step.condition), step.span))
    then_env = run(step.then, env.copy())
    else_env = run(step.orelse, env.copy())
    ctx.conditions.pop()
    return join([("then", then_env), ("else", else_env)], step.span,
                f"if at {short(step.span)}")


def _arm_fields(value_type: VType) -> dict[str, dict[str, VType]] | None:
    if isinstance(value_type, DecisionT):
        return {"granted": {"permit": PermitT(value_type.proposal, value_type.op)},
                "denied": {"reason": DataT("json")}}
    if isinstance(value_type, OutcomeT):
        return {Outcome.COMPLETED.value: {"result": DataT("json")},
                Outcome.FAILED_NO_EFFECT.value: {"error": DataT("json")},
                Outcome.UNKNOWN.value: {"error": DataT("json")}}
    return None


def check_match(ctx: Ctx, env: Env, step: Match, run: Run) -> Env:
    subject = ctx.resolve(env, step.subject)
    vtype, binding = subject.type, subject.binding
    closed = _arm_fields(vtype)
    tag_vid = binding.vid if binding is not None and closed is not None else None
    open_data = vtype == DataT("json")
    if closed is None and not open_data and not isinstance(vtype, PoisonT):
        ctx.report(D.TYPE_MISMATCH, f"cannot match on {describe(vtype)}", step.subject.span,
                   "match on a decision, a dispatch outcome or JSON data; use `if` for a bool",
                   required="a tagged value", actual=describe(vtype))
    if isinstance(vtype, DecisionT) and binding is not None:
        env.consume(binding.name, D.CONSUMED_PERMIT,
                    f"consumed by the match at {short(step.span)}", step.span)
    explicit = {arm.tag for arm in step.arms if arm.tag != "_"}
    wildcard = any(arm.tag == "_" for arm in step.arms)
    shown = ", ".join(arm.tag for arm in step.arms) or "nothing"
    if closed is not None:
        missing = [tag for tag in closed if tag not in explicit]
        if missing and not wildcard:
            ctx.report(D.NON_EXHAUSTIVE_MATCH, f"match on `{step.subject}` does not cover "
                       f"{', '.join(missing)}", step.span,
                       f"add an arm for {' and '.join(missing)} (or `_`)",
                       required=f"arms for {', '.join(closed)}", actual=f"arms for {shown}")
    verdict = evidence.verdict_of(env, step.subject) if open_data else None
    closed_verdict = verdict is not None and explicit >= set(VERDICTS)  # pass | fail
    if open_data and not wildcard and not closed_verdict:
        ctx.report(D.NON_EXHAUSTIVE_MATCH, f"match on JSON data `{step.subject}` needs a `_` arm",
                   step.span, "its tags are not known statically: add a `_` arm",
                   required="an arm for `_`", actual=f"arms for {shown}")
    paths: list[tuple[str, Env]] = []
    for arm in step.arms:
        arm_env = env.copy()
        if tag_vid is not None:
            _narrow(arm_env, tag_vid, arm.tag, explicit, arm.span)
        if verdict is not None:
            evidence.narrow_verdict(ctx, arm_env, verdict, arm.tag, explicit, arm.span)
        fields = {} if closed is None else closed.get(arm.tag, {})
        if closed is not None and arm.tag != "_" and arm.tag not in closed:
            ctx.report(D.TYPE_MISMATCH, f"{describe(vtype)} has no tag `{arm.tag}`", arm.span,
                       f"use the tags {', '.join(closed)}", required=" | ".join(closed),
                       actual=arm.tag)
        for field_name, name in arm.bindings:
            ftype: VType = fields.get(field_name, PoisonT()) if closed is not None else (
                DataT("json") if open_data else PoisonT())
            if closed is not None and field_name not in fields:
                ctx.report(D.TYPE_MISMATCH, f"arm `{arm.tag}` has no field `{field_name}`",
                           arm.span, f"bind one of: {', '.join(fields) or 'nothing'}",
                           required=", ".join(fields) or "no fields", actual=field_name)
            prov = subject.prov if open_data else Prov.TRUSTED
            vid = ctx.fresh(arm.span)
            arm_env.bind(Binding(name, vid, ftype, prov, arm.span))
            if open_data:
                evidence.carry(arm_env, step.subject, vid, (field_name,))
            elif isinstance(vtype, OutcomeT) and (arm.tag, field_name) == ("completed", "result"):
                evidence.completed(arm_env, vtype, vid, name, arm.span)
        paths.append((arm.tag, run(arm.body, arm_env)))
    if not paths:
        return env
    return join(paths, step.span, f"match at {short(step.span)}")


def _narrow(env: Env, vid: str, tag: str, explicit: set[str], span: Span) -> None:
    for rid, resource in list(env.resources.items()):
        state = resource.state
        if not isinstance(state, Tagged) or state.vid != vid:
            continue
        new: State
        if tag == "_":
            rest = tuple((t, s) for t, s in state.by_tag if t not in explicit)
            targets = {s for _, s in rest}
            new = targets.pop() if len(targets) == 1 else replace(state, by_tag=rest)
        else:
            new = dict[str, State](state.by_tag).get(tag, state)
        env.set_state(rid, new, span)


def check_loop(ctx: Ctx, env: Env, step: Loop, run: Run) -> Env:
    body_env = env.copy()
    if step.over is not None:
        items = ctx.resolve(env, step.over)
        if not isinstance(items.type, DataT | PoisonT) or items.type == DataT("bool"):
            ctx.report(D.TYPE_MISMATCH, f"`{step.over}` is not a list", step.over.span,
                       "loop over JSON data (a list) or a number of times",
                       required="a JSON list", actual=describe(items.type))
        item = ctx.fresh(step.span)
        body_env.bind(Binding(step.item or "item", item, DataT("json"), items.prov, step.span))
        evidence.carry(body_env, step.over, item, receipts_only=True)
    if step.parallel:
        ctx.recorders.append({})
    out = run(step.body, body_env)
    if step.parallel:
        for key, use in ctx.recorders.pop().items():
            display, span = use.display, use.span
            if is_outer(key, env) and not use.shared:  # a shareable read's grant
                ctx.report(D.PARALLEL_CAPTURE, f"every iteration of a parallel loop would use "
                           f"{display}", span, "a permit or handle cannot be duplicated by a "
                           "parallel map; create or obtain it inside the body "
                           "(docs/design.md#budgets)",
                           required="no owned value shared between iterations",
                           actual=f"{display} captured from outside",
                           notes=[Note("loop", step.span)])
    else:
        _back_edge(ctx, env, out, step)
    result = env.copy()
    for name, before in env.bindings.items():
        after = out.bindings[name]
        # Zero iterations or some: data the body rebinds is one of two values (facts.py).
        result.bindings[name] = after if not isinstance(after.type, DataT) else replace(
            after, vid=joined_vid([before.vid, after.vid], step.span))
    result.resources.update(out.resources)  # body-made resources stay known (unreferenced)
    result.marks.update(out.marks)
    result.evidence = join_evidence(
        [("skipped", env.vids(), env.evidence), ("iterated", out.vids(), out.evidence)],
        {name: result.bindings[name].vid for name in env.bindings}, step.span,
        f"loop at {short(step.span)}")
    return result


def _back_edge(ctx: Ctx, env: Env, out: Env, step: Loop) -> None:
    """The body must preserve the loop invariant at the back edge
    (docs/workflows.md#typing-rules)."""
    for name, before in env.bindings.items():
        after = out.bindings[name]
        edited = isinstance(before.type, HandleT) and (
            out.resources[before.type.rid] != env.resources[before.type.rid])
        if before.gone is None and after.gone is not None and after.vid == before.vid \
                and not edited:  # an edited resource is reported once, as AGL-E011 below
            ctx.report(D.CONSUMED_PERMIT if after.gone.code is D.CONSUMED_PERMIT
                       else D.INCOMPATIBLE_BRANCH_OWNERSHIP,
                       f"`{name}` is consumed inside the loop body; a later iteration "
                       "would use it again", after.gone.at or step.span,
                       "obtain it inside the body, or move the step out of the loop",
                       required=f"{describe(before.type)} still live at the back edge",
                       actual=after.gone.reason, notes=[Note("loop", step.span)])
    for key, span in out.marks.items():
        kind, _, vid = key.partition(":")
        outer = next((b for b in env.bindings.values() if b.vid == vid), None)
        if key in env.marks or outer is None:
            continue
        if kind == "dispatched" and isinstance(outer.type, ProposalT) and repeatable(
                ctx.registry.resolve(outer.type.op)):
            continue
        code = D.CONSUMED_PERMIT if kind == "requested" else D.UNSAFE_RETRY
        ctx.report(code, f"a proposal from outside the loop is {kind} in its body; a later "
                   f"iteration would do so again", span,
                   "propose inside the loop body so each iteration has its own proposal",
                   required="a fresh proposal per iteration", actual=f"{kind} at {short(span)}",
                   notes=[Note("loop", step.span)])
    for rid, before_res in env.resources.items():
        after_res = out.resources[rid]
        if not same_state(after_res, before_res):
            ctx.report(D.LOOP_INVARIANT, f"the loop body changes `{before_res.label}`",
                       after_res.changed_at or step.span,
                       "keep resources from outside the loop in their state, or create the "
                       "resource inside the body (changing states are not inferred)",
                       required=f"{resource_text(before_res)} at the back edge",
                       actual=resource_text(after_res),
                       notes=[Note("loop", step.span)])


def check_try(ctx: Ctx, env: Env, step: Try, run: Run) -> Env:
    ctx.snapshots.append([])
    body = run(step.body, env.copy())
    snapshots = ctx.snapshots.pop()
    entry = _catch_entry(env, snapshots)
    vid = ctx.fresh(step.span)
    if step.bind is not None and step.result is not None and step.fallback is not None:
        result = ctx.resolve(body, step.result)
        fallback = ctx.resolve(entry, step.fallback)
        if result.binding is not None and isinstance(result.type, (*AFFINE, ProposalT)):
            body.consume(result.binding.name, D.CONSUMED_PERMIT, f"moved into `{step.bind}`, "
                         f"which the fallback may replace ({short(step.span)})", step.span)
        same = isinstance(result.type, DataT) and result.type == fallback.type
        vtype: VType = result.type if same else DataT("json")
        span = step.fallback.span
        body.bind(Binding(step.bind, vid, vtype, Prov.FALLBACK, span))
        entry.bind(Binding(step.bind, vid, vtype, Prov.FALLBACK, span))
        # Never an attestation (a fallback may replace it); receipts of either may remain.
        evidence.mix(body, [step.result], vid)
        evidence.mix(entry, [step.fallback], vid)
    catch = run(step.catch, entry) if step.catch is not None else entry
    return join([("try", body), ("catch", catch)], step.span, f"try at {short(step.span)}")


def _catch_entry(base: Env, snapshots: list[Env]) -> Env:
    """What may hold when the body fails at any step: nothing consumed comes back."""
    entry = base.copy()
    for snapshot in snapshots:
        for name, before in base.bindings.items():
            after = snapshot.bindings.get(name)
            if before.gone is None and after is not None and after.gone is not None \
                    and after.vid == before.vid and entry.bindings[name].gone is None:
                entry.bindings[name] = replace(before, gone=Gone(
                    D.CONSUMED_PERMIT, f"may have been consumed before the failure "
                    f"({after.gone.reason})", after.gone.at))
        for rid, before_res in base.resources.items():
            after_res = snapshot.resources[rid]
            if not same_state(after_res, before_res) \
                    and not isinstance(entry.resources[rid].state, Conflicted):
                entry.resources[rid] = replace(before_res, changed_at=after_res.changed_at,
                                               state=Conflicted("may have changed in the try "
                                                                "body before the failure"))
        for key, span in snapshot.marks.items():
            entry.marks.setdefault(key, span)
    return entry


__all__ = ["check_if", "check_loop", "check_match", "check_try"]
