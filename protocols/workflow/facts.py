"""What the checker knows of the evidence chain (docs/design.md#evidence): plans, facts and their
joins.

A proposal of an evidence operation carries a *plan*: the report revision an attest judges (and
under which policy), or the question a fetch issues receipts for. A completed outcome turns
the plan into *facts* about the values the workflow holds, keyed by value id like the rest of
the environment:

- an `Attestation`: the value is (or contains, at a known field path) the record of one
  completed attest of revision `revision` of resource `rid`. It is `passed` only where a match
  on its verdict took the `pass` arm. Only field access, `let` and the fields of a match on data
  carry it: a literal, a host message, a model's output or a try fallback never is one.
- receipts (`Cited`): the value may contain a receipt of these questions, or text derived from
  one. Field access, `let`, match fields, loop items, try results and fallbacks and an agent's
  output (from its inputs) carry them: a may-analysis, joined by union.
- per report revision (`Citing`): the questions whose receipts its payload may cite.

At a join an attestation stays only when every path holds one of the same revision and policy
(passed only if passed on every path); otherwise the value is `Lost`, which remembers where, so
that a publication names the join rather than an unknown value. Pure data: no rules here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeAlias

from protocols.workflow.ir import Span


@dataclass(frozen=True)
class Attests:
    """A proposal that attests revision `revision` of `rid` under `policy` (None: unknown)."""

    rid: str
    revision: int
    policy: str | None
    at: Span


@dataclass(frozen=True)
class Fetches:
    """A proposal whose completion issues a receipt for question `rid`."""

    rid: str
    at: Span


Plan: TypeAlias = Attests | Fetches

#: Where a completed attest's result (`{"attestation": {...}}`) holds the id and the verdict.
ID_AT = ("attestation", "id")
VERDICT_AT = ("attestation", "result")
VERDICTS = ("pass", "fail")


@dataclass(frozen=True)
class Attestation:
    """A value holding the record of one completed attest, or its id or verdict.

    `id_at`/`verdict_at` are the field paths from this value to the attestation's id and verdict
    (`()` when the value is that field itself, None when it does not contain it). `key` names
    the attest (its outcome's `result` binding), so narrowing its verdict reaches every copy.
    """

    key: str
    name: str  # the binding of the whole record, for help texts
    rid: str
    revision: int
    policy: str | None
    passed: bool
    origin: Span
    id_at: tuple[str, ...] | None = ID_AT
    verdict_at: tuple[str, ...] | None = VERDICT_AT

    def follow(self, fields: Sequence[str]) -> Attestation | None:
        """The fact of `value.fields`, or None when that field holds neither id nor verdict."""
        id_at, verdict_at = _rest(self.id_at, fields), _rest(self.verdict_at, fields)
        if id_at is None and verdict_at is None:
            return None
        return replace(self, id_at=id_at, verdict_at=verdict_at)

    def same_record(self, other: Attestation) -> bool:
        """Whether two attestations bind the same revision, policy and field paths."""
        return (self.rid, self.revision, self.policy, self.id_at, self.verdict_at) == (
            other.rid, other.revision, other.policy, other.id_at, other.verdict_at)


def _rest(path: tuple[str, ...] | None, fields: Sequence[str]) -> tuple[str, ...] | None:
    n = len(fields)
    if path is None or path[:n] != tuple(fields):
        return None
    return path[n:]


@dataclass(frozen=True)
class Lost:
    """An attestation that held on some paths of a join only: unavailable after it."""

    reason: str
    at: Span


Fact: TypeAlias = Attestation | Lost

#: The questions (resource id, where one of its receipts was fetched) a value may carry, by id.
Cited: TypeAlias = tuple[tuple[str, Span], ...]


def cite(*groups: Cited) -> Cited:
    """The union of `groups`, one entry per question (the first place seen), in id order."""
    found: dict[str, Span] = {}
    for group in groups:
        for rid, span in group:
            found.setdefault(rid, span)
    return tuple(sorted(found.items(), key=lambda item: item[0]))


@dataclass(frozen=True)
class Citing:
    """The questions a report revision's payload may cite receipts of, and where it was written."""

    questions: Cited
    at: Span


class Evidence:
    """The facts of one path: attestations and receipts by value id, citations by revision."""

    def __init__(self) -> None:
        self.attestations: dict[str, Fact] = {}
        self.receipts: dict[str, Cited] = {}
        self.reports: dict[tuple[str, int], Citing] = {}

    def copy(self) -> Evidence:
        other = Evidence()
        other.attestations = dict(self.attestations)
        other.receipts = dict(self.receipts)
        other.reports = dict(self.reports)
        return other

    def of(self, vid: str, fields: Sequence[str]) -> tuple[Fact | None, Cited]:
        """The attestation fact and the receipts of `value.fields` for value `vid`."""
        fact = self.attestations.get(vid)
        if isinstance(fact, Attestation):
            fact = fact.follow(fields)
        return fact, self.receipts.get(vid, ())

    def put(self, vid: str, fact: Fact | None, cited: Cited) -> None:
        if fact is not None:
            self.attestations[vid] = fact
        if cited:
            self.receipts[vid] = cited

    def narrow(self, key: str) -> None:
        """The verdict of attestation `key` is `pass` on this path."""
        for vid, fact in list(self.attestations.items()):
            if isinstance(fact, Attestation) and fact.key == key:
                self.attestations[vid] = replace(fact, passed=True)

    def merge(self, other: Evidence) -> None:
        """Add what a parallel branch learnt (its values are its own: disjoint)."""
        self.attestations.update(other.attestations)
        for vid, cited in other.receipts.items():
            self.receipts[vid] = cite(self.receipts.get(vid, ()), cited)
        for key, citing in other.reports.items():
            self.reports[key] = _union(self.reports.get(key), citing)


def _union(a: Citing | None, b: Citing) -> Citing:
    return b if a is None else Citing(cite(a.questions, b.questions), a.at)


def join_evidence(paths: Sequence[tuple[str, Mapping[str, str], Evidence]],
                  result: Mapping[str, str], at: Span, construct: str) -> Evidence:
    """The facts after paths meet. `paths`: (label, name -> value id, facts) per path;
    `result`: name -> value id after the join (`env.join` makes one when the paths differ)."""
    joined = Evidence()
    for name, vid in result.items():
        present = [(label, names[name], evidence) for label, names, evidence in paths
                   if name in names]
        cited = cite(*(evidence.receipts.get(v, ()) for _, v, evidence in present))
        if cited:
            joined.receipts[vid] = cited
        facts = [(label, evidence.attestations.get(v)) for label, v, evidence in present]
        fact = _join_fact(name, facts, len(paths), at, construct)
        if fact is not None:
            joined.attestations[vid] = fact
    for _label, _names, evidence in paths:
        for key, citing in evidence.reports.items():
            joined.reports[key] = _union(joined.reports.get(key), citing)
    return joined


def _join_fact(name: str, facts: list[tuple[str, Fact | None]], total: int, at: Span,
               construct: str) -> Fact | None:
    if all(fact is None for _, fact in facts):
        return None
    lost = next((fact for _, fact in facts if isinstance(fact, Lost)), None)
    if lost is not None:
        return lost
    held = [fact for _, fact in facts if isinstance(fact, Attestation)]
    first = held[0]
    if len(held) == total and all(fact.same_record(first) for fact in held):
        keys = "|".join(dict.fromkeys(fact.key for fact in held))
        return replace(first, key=keys, passed=all(fact.passed for fact in held))
    if len(held) == total:
        return Lost(f"`{name}` holds attestations of different revisions or policies on the "
                    f"paths of the {construct}", at)
    labels = ", ".join(f"`{label}`" for label, fact in facts if isinstance(fact, Attestation))
    return Lost(f"`{name}` holds an attestation only on the {labels} path of the {construct}",
                at)
