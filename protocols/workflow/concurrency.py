"""Typing rules of parallel branches and races (docs/workflows.md#typing-rules).

Branches own disjoint handles, permits and decisions: a value or resource used by two branches
is AGL-E012 at its use in the later branch, unless every use of it in both is a read argument
of a contract granting shared reads (`shareable`). After `parallel` every branch has
completed, so their changes (disjoint) all apply. A race admits no protected external write
(AGL-E007, raised by the action rules while `ctx.races` is non-empty) and, since a losing
branch is cancelled at an arbitrary point, whatever any branch touched is unavailable after it.
"""

from __future__ import annotations

from dataclasses import replace

from protocols.denials import DiagnosticCode
from protocols.workflow.context import Ctx, Use
from protocols.workflow.control import Run
from protocols.workflow.diagnostics import Note
from protocols.workflow.env import Conflicted, Env, Gone, is_outer
from protocols.workflow.ir import Parallel, Race, Span

D = DiagnosticCode


def check_parallel(ctx: Ctx, env: Env, step: Parallel | Race, run: Run) -> Env:
    is_race = isinstance(step, Race)
    construct = "race" if is_race else "parallel"
    seen: dict[str, tuple[str, Use]] = {}
    outs: list[tuple[str, Env]] = []
    if is_race:
        ctx.races.append(step.span)
    for branch in step.branches:
        ctx.recorders.append({})
        out = run(branch.body, env.copy())
        for key, use in ctx.recorders.pop().items():
            if not is_outer(key, env):
                continue
            display, span = use.display, use.span
            if key in seen and not (use.shared and seen[key][1].shared):
                other, first_use = seen[key]
                first = first_use.span
                ctx.report(D.PARALLEL_CAPTURE, f"{display} is used by {construct} branches "
                           f"`{other}` and `{branch.name}`", span,
                           "give each branch its own handles, proposals, decisions and "
                           "permits: create or obtain them inside the branch, or use them "
                           f"before or after the {construct}; JSON data may be used by every "
                           "branch",
                           required="disjoint owned values per branch",
                           actual=f"{display} captured by both", notes=[Note("first use", first)])
            elif key not in seen or not use.shared:
                seen[key] = (branch.name, use)
        outs.append((branch.name, out))
    if is_race:
        ctx.races.pop()
    return _after_race(env, outs, step.span) if is_race else _merge(ctx, env, outs, step.span)


def _merge(ctx: Ctx, base: Env, outs: list[tuple[str, Env]], at: Span) -> Env:
    merged = base.copy()
    bound_by: dict[str, str] = {}
    for label, out in outs:
        for name, binding in out.bindings.items():
            if base.bindings.get(name) == binding:
                continue
            if name in bound_by and name not in base.bindings:
                ctx.report(D.PARALLEL_CAPTURE, f"parallel branches `{bound_by[name]}` and "
                           f"`{label}` both bind `{name}`", binding.origin,
                           "bind distinct names in parallel branches",
                           required="distinct names", actual=f"`{name}` bound twice")
            bound_by[name] = label
            merged.bindings[name] = binding
        for rid, resource in out.resources.items():
            if base.resources.get(rid) != resource:
                merged.resources[rid] = resource
        merged.marks.update(out.marks)
        merged.evidence.merge(out.evidence)
    return merged


def _after_race(base: Env, outs: list[tuple[str, Env]], at: Span) -> Env:
    """Losers are cancelled at any point: whatever a branch touched is unavailable after."""
    result = base.copy()
    for label, out in outs:
        for name, before in base.bindings.items():
            after = out.bindings.get(name)
            if after != before and result.bindings[name].gone is None:
                result.bindings[name] = replace(before, gone=Gone(
                    D.INCOMPATIBLE_BRANCH_OWNERSHIP,
                    f"`{name}` may have been used by the cancelled race branch `{label}`", at))
        for rid, before_res in base.resources.items():
            if out.resources[rid] != before_res:
                result.resources[rid] = replace(before_res, changed_at=at, state=Conflicted(
                    f"changed by race branch `{label}`, which may have been cancelled"))
        for key, span in out.marks.items():
            result.marks.setdefault(key, span)
    return result
