"""The checker's environments Γ;Δ (docs/workflows.md#typing-rules): value types, ownership, resource
states, joins.

A `Binding` gives a name its static type and provenance. Affine values (handles, decisions,
permits) leave Δ when consumed: the binding stays, marked `gone` with the reason and the place,
so a later use is reported precisely (AGL-E003) instead of as an unknown name. Resource states
live beside the bindings, keyed by a static resource id, because a handle names a revision of a
resource while the protocol state belongs to the resource (docs/design.md#resources).

A state is a plain protocol state, `Tagged` (it depends on which tag a decision or dispatch
outcome takes; only a match on that value narrows it) or `Conflicted` (paths disagreed at a
join, so the resource is unavailable: docs/workflows.md#typing-rules "at a conditional or match join
...").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TypeAlias

from protocols.denials import DiagnosticCode
from protocols.workflow.facts import Evidence, Plan, join_evidence
from protocols.workflow.ir import Span


class Prov(StrEnum):
    """Where a value came from. Only `TRUSTED` values can be permits, handles or decisions."""

    TRUSTED = "trusted"
    LITERAL = "literal"
    MODEL = "model"
    HOST = "host"
    FALLBACK = "fallback"


SOURCE = {
    Prov.TRUSTED: "a trusted step",
    Prov.LITERAL: "a literal written in the workflow",
    Prov.MODEL: "a model's output",
    Prov.HOST: "a host message",
    Prov.FALLBACK: "a try fallback",
}


@dataclass(frozen=True)
class DataT:
    kind: str  # "bool" or "json"


@dataclass(frozen=True)
class HandleT:
    rid: str
    revision: int
    protocol: str


@dataclass(frozen=True)
class ProposalT:
    op: str
    resources: tuple[tuple[str, int], ...]  # (resource id, revision) snapshotted
    reads: tuple[str, ...] = ()  # the snapshotted resources it only reads: never moved
    plan: Plan | None = None  # what its completion proves (facts.py)


@dataclass(frozen=True)
class DecisionT:
    proposal: str  # the proposal's value id
    op: str


@dataclass(frozen=True)
class PermitT:
    proposal: str
    op: str


@dataclass(frozen=True)
class OutcomeT:
    op: str
    plan: Plan | None = None


@dataclass(frozen=True)
class PoisonT:
    """The type of a value whose producing step was already refused: silences cascades."""


VType: TypeAlias = DataT | HandleT | ProposalT | DecisionT | PermitT | OutcomeT | PoisonT
AFFINE = (HandleT, DecisionT, PermitT)


def article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def describe(vtype: VType) -> str:
    if isinstance(vtype, DataT):
        return "a bool" if vtype.kind == "bool" else "JSON data"
    if isinstance(vtype, HandleT):
        return f"{article(vtype.protocol)} {vtype.protocol} handle (revision {vtype.revision})"
    if isinstance(vtype, ProposalT):
        return f"a proposal of {vtype.op}"
    if isinstance(vtype, DecisionT):
        return f"an approval decision for {vtype.op}"
    if isinstance(vtype, PermitT):
        return f"a permit for {vtype.op}"
    if isinstance(vtype, OutcomeT):
        return f"a dispatch outcome of {vtype.op}"
    return "an invalid value"


@dataclass(frozen=True)
class Gone:
    """Why a binding left Δ: consumed (AGL-E003) or lost at a join (AGL-E004)."""

    code: DiagnosticCode
    reason: str
    at: Span | None


@dataclass(frozen=True)
class Binding:
    name: str
    vid: str
    type: VType
    prov: Prov
    origin: Span
    gone: Gone | None = None


@dataclass(frozen=True)
class Tagged:
    vid: str
    name: str
    by_tag: tuple[tuple[str, str], ...]

    def __str__(self) -> str:
        arms = " | ".join(f"{state} if {tag}" for tag, state in self.by_tag)
        return f"{arms} (not yet matched on `{self.name}`)"


@dataclass(frozen=True)
class Conflicted:
    detail: str

    def __str__(self) -> str:
        return f"unavailable: {self.detail}"


State: TypeAlias = str | Tagged | Conflicted


def state_text(state: State) -> str:
    """A short rendering: the plain state, the states a tag may select, or `unavailable`."""
    if isinstance(state, str):
        return state
    if isinstance(state, Tagged):
        return " | ".join(dict.fromkeys(target for _, target in state.by_tag))
    return "unavailable"


def same_state(a: Resource, b: Resource) -> bool:
    """Whether two views of a resource agree on its state and revision."""
    return (a.state, a.revision) == (b.state, b.revision)


def resource_text(resource: Resource) -> str:
    return f"{state_text(resource.state)} (revision {resource.revision})"


@dataclass(frozen=True)
class Resource:
    rid: str
    label: str
    protocol: str
    state: State
    revision: int
    changed_at: Span | None
    payload: object = None  # statically known payload (a literal), else None


class Env:
    """Δ and Γ together: mutable while one path is checked, copied at every branch."""

    def __init__(self) -> None:
        self.bindings: dict[str, Binding] = {}
        self.resources: dict[str, Resource] = {}
        # Per proposal value id: where its one approval was requested / it was dispatched.
        # Keyed by value, not name, so that an alias made with `let` shares them.
        self.marks: dict[str, Span] = {}
        self.evidence = Evidence()

    def copy(self) -> Env:
        other = Env()
        other.bindings = dict(self.bindings)
        other.resources = dict(self.resources)
        other.marks = dict(self.marks)
        other.evidence = self.evidence.copy()
        return other

    def vids(self) -> dict[str, str]:
        """Name -> value id of every binding, live or gone."""
        return {name: binding.vid for name, binding in self.bindings.items()}

    def bind(self, binding: Binding) -> None:
        self.bindings[binding.name] = binding

    def consume(self, name: str, code: DiagnosticCode, reason: str, at: Span) -> None:
        binding = self.bindings.get(name)
        if binding is not None and binding.gone is None:
            self.bindings[name] = replace(binding, gone=Gone(code, reason, at))

    def set_state(self, rid: str, state: State, at: Span, *, revision: int | None = None,
                  payload: object = None, keep_payload: bool = True) -> None:
        old = self.resources[rid]
        self.resources[rid] = replace(
            old, state=state, changed_at=at,
            revision=old.revision if revision is None else revision,
            payload=old.payload if keep_payload else payload)


def join(paths: list[tuple[str, Env]], at: Span, construct: str) -> Env:
    """The environment after paths meet (docs/workflows.md#typing-rules): what every path agrees on
    stays available.

    A binding consumed on some paths only, bound on some only, or bound to different affine
    values becomes unavailable (AGL-E004 on use); a resource whose states differ is
    `Conflicted`. Plain data bound on every path stays, with the least trusted provenance.
    """
    result = Env()
    names: dict[str, None] = {}
    rids: dict[str, None] = {}
    for _label, env in paths:
        names.update(dict.fromkeys(env.bindings))
        rids.update(dict.fromkeys(env.resources))
    for name in names:
        result.bindings[name] = _join_binding(name, paths, at, construct)
    for rid in rids:
        result.resources[rid] = _join_resource(rid, paths, at, construct)
    for _label, env in paths:  # "may have been requested/dispatched" on some path
        for key, span in env.marks.items():
            result.marks.setdefault(key, span)
    result.evidence = join_evidence([(label, env.vids(), env.evidence) for label, env in paths],
                                    result.vids(), at, construct)
    return result


def joined_vid(vids: list[str], at: Span) -> str:
    """The id of a value that is one of `vids` depending on the path: new when they differ, so
    its facts (facts.py) are joined, never those of one path."""
    distinct = list(dict.fromkeys(vids))
    return distinct[0] if len(distinct) == 1 else f"{'|'.join(distinct)}@{at.path}"


def _join_binding(name: str, paths: list[tuple[str, Env]], at: Span, construct: str) -> Binding:
    present = [(label, env.bindings[name]) for label, env in paths if name in env.bindings]
    first = present[0][1]
    if len(present) < len(paths):
        labels = ", ".join(f"`{label}`" for label, _ in present)
        return replace(first, gone=Gone(
            DiagnosticCode.INCOMPATIBLE_BRANCH_OWNERSHIP,
            f"`{name}` is bound only on the {labels} path of the {construct}", at))
    bindings = [b for _, b in present]
    if all(b.vid == first.vid and b.type == first.type for b in bindings):
        gones = [b.gone for b in bindings]
        if all(g is None for g in gones) or all(g is not None for g in gones):
            return first
        used = ", ".join(f"`{label}`" for label, b in present if b.gone is not None)
        kept = ", ".join(f"`{label}`" for label, b in present if b.gone is None)
        return replace(first, gone=Gone(
            DiagnosticCode.INCOMPATIBLE_BRANCH_OWNERSHIP,
            f"`{name}` is consumed on the {used} path but not on {kept} of the {construct}",
            at))
    if all(isinstance(b.type, HandleT) and b.type == first.type and b.gone is None
           for b in bindings):
        return first  # the same revision of the same resource, made on every path
    if all(isinstance(b.type, DataT) and b.type == first.type and b.gone is None
           for b in bindings):
        worst = next((b.prov for b in bindings if b.prov is not Prov.TRUSTED), Prov.TRUSTED)
        return replace(first, prov=worst, vid=joined_vid([b.vid for b in bindings], at))
    return replace(first, gone=Gone(
        DiagnosticCode.INCOMPATIBLE_BRANCH_OWNERSHIP,
        f"`{name}` holds different values on the paths of the {construct}", at))


def _join_resource(rid: str, paths: list[tuple[str, Env]], at: Span, construct: str) -> Resource:
    present = [(label, env.resources[rid]) for label, env in paths if rid in env.resources]
    first = present[0][1]
    if len(present) == len(paths) and all(same_state(r, first) for _, r in present):
        return first
    detail = ", ".join(f"{resource_text(r)} on `{label}`" for label, r in present)
    return replace(first, state=Conflicted(f"{detail} after the {construct}"), changed_at=at)


def is_outer(key: str, base: Env) -> bool:
    """Whether a footprint key (`r:<resource>` or `b:<value>`) names something in `base`."""
    kind, _, ident = key.partition(":")
    if kind == "r":
        return ident in base.resources
    return any(b.vid == ident for b in base.bindings.values())
