"""Races at run time (docs/design.md#budgets; docs/workflows.md#concurrent-steps): no protected
write inside a race, the first branch to end wins, the losers are cancelled.

- **No protected write.** The checker refuses a dispatch of a write, or an agent holding a write
  tool, inside a race (AGL-E007). The runtime refuses it again before any step
  (`protected_race`, `refuse_protected_race`), for an IR forced past the checker: cancelling a
  losing branch cannot take back an effect it already performed.
- **The winner** is the first branch to end without a refusal: one journal entry under the
  race's key, whose first write wins (`Journal.put`), also across processes.
- **The losers** are cancelled: each checks for a winner before each of its steps and stops
  (`cancelled`); every proposal a loser made is cancelled through `proposal_cancel`, which
  withdraws it before its claim, or asks its running handler to stop through its context after
  (`HandlerContext.cancelled`); a consumed permit is never freed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from dispatch.models import Proposal, TranscriptEntry
from dispatch.runtime import get_runtime
from dispatch.services.cancellation import proposal_cancel
from dispatch.workflows.context import RunContext
from dispatch.workflows.journal import step_key
from dispatch.workflows.shape import walk
from dispatch.workflows.values import WorkflowRefused
from protocols.denials import Denial, DenialCode
from protocols.workflow.ir import AgentCall, Block, Dispatch, Propose, Race, Ref

log = logging.getLogger(__name__)

WRITES = frozenset({"external_write", "financial_write"})


def winner_key(key: str) -> str:
    return step_key(f"{key}!race", ())


def refuse_protected_race(steps: Block) -> None:
    """Before any step: a race holding a dispatch of a write (or an agent with a write tool)."""
    proposed = {s.bind: s.operation for s in walk(steps) if isinstance(s, Propose) and s.bind}
    for race in (s for s in walk(steps) if isinstance(s, Race)):
        for branch in race.branches:
            for step, operation in _writes(branch.body, proposed):
                raise WorkflowRefused(
                    DenialCode.PROTECTED_RACE,
                    f"race branch `{branch.name}` holds the protected write {operation} (at "
                    f"{step.span.where()}): cancelling a losing branch cannot retract an effect "
                    "it already performed; move it out of the race", path=step.span.path)


def _writes(body: Block, proposed: dict[str, str]) -> Iterator[tuple[Dispatch | AgentCall, str]]:
    registry = get_runtime().registry
    for step in walk(body):
        if isinstance(step, AgentCall):
            operations = list(step.tools)
        elif isinstance(step, Dispatch):
            name = step.proposal.name if isinstance(step.proposal, Ref) else ""
            # A proposal the runtime cannot trace to its `propose` counts as a write.
            operations = [proposed.get(name, "?")]
        else:
            continue
        for operation in operations:
            try:
                effects = {e.value for e in registry.resolve(operation).possible_effects}
            except Denial:
                effects = set(WRITES)
            if effects & WRITES:
                yield step, operation


def winner(ctx: RunContext, key: str) -> str | None:
    """The branch that won the race at `key`, as the store holds it now."""
    payload = TranscriptEntry.objects.filter(
        execution_id=ctx.execution_id, call_id=winner_key(key),
        kind=TranscriptEntry.Kind.TOOL_RESULT).values_list("payload", flat=True).first()
    return None if payload is None else str(dict(payload)["winner"])


def claim_win(ctx: RunContext, key: str, label: str) -> str:
    """Record `label` as the winner unless another branch won first; the winner."""
    recorded = ctx.journal.put(winner_key(key), {"winner": label}, ctx.now)
    return str(recorded["winner"])


def cancel_lane(ctx: RunContext, race: Race, label: str, loops: tuple[int, ...],
                won_by: str) -> list[str]:
    """Cancel every proposal branch `label` made (before its claim: withdrawn; during an
    attempt: its handler asked to stop). Idempotent; answers the proposals it cancelled now."""
    branch = next(b for b in race.branches if b.name == label)
    keys = {step_key(s.span.path, loops) for s in walk(branch.body) if isinstance(s, Propose)}
    prefixes = tuple(f"{s.span.path}@" for s in walk(branch.body) if isinstance(s, Propose))
    cancelled = []
    made = Proposal.objects.filter(execution_id=ctx.execution_id, principal=ctx.principal,
                                   cancelled_at__isnull=True)
    for proposal in made.only("id", "call_id"):
        if proposal.call_id not in keys and not (proposal.call_id or "").startswith(prefixes):
            continue
        try:
            proposal_cancel(actor=ctx.principal, proposal_id=proposal.id, now=ctx.now,
                            reason=f"race branch `{label}` lost to `{won_by}`")
        except Denial as denial:  # already settled or cancelled: nothing left to stop
            log.info("race loser %s: %s", proposal.id, denial)
            continue
        cancelled.append(proposal.id)
    return cancelled
