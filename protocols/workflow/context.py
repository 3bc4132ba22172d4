"""The checker's context C and its bookkeeping: contracts, authority, effects, diagnostics.

`Ctx` holds what does not change along a path (the registry, the declared effect ceiling and
authority, the deployment grants) and the collectors that control-flow rules need: footprints
for disjointness of parallel branches (docs/workflows.md#typing-rules), snapshots for what a catch
may observe (docs/workflows.md#typing-rules) and the enclosing races and boolean conditions.
`resolve`/`expect` turn a `Ref` or `Literal` into a typed value and report the ownership and forgery
errors of a use.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from protocols.contracts import ContractRegistry, Effect, Idempotency, OperationContract
from protocols.denials import Denial, DiagnosticCode
from protocols.grants import Grant
from protocols.lifecycle import ResourceProtocol
from protocols.workflow.diagnostics import Diagnostic, Note
from protocols.workflow.env import (
    AFFINE,
    SOURCE,
    Binding,
    DataT,
    Env,
    HandleT,
    PermitT,
    PoisonT,
    Prov,
    VType,
    describe,
)
from protocols.workflow.ir import Authority, Expr, Literal, Span

D = DiagnosticCode
WRITES = frozenset({Effect.EXTERNAL_WRITE.value, Effect.FINANCIAL_WRITE.value})
APPROVAL_HELP = ("obtain the permit from the Granted arm of `match` on the decision of "
                 "`request_approval` for this proposal (docs/design.md#permits)")


@dataclass(frozen=True)
class Use:
    """A value's or resource's use inside a branch: what to call it, where, and whether every
    use so far is a shared read (docs/workflows.md#typing-rules)."""

    display: str
    span: Span
    shared: bool


@dataclass(frozen=True)
class Value:
    type: VType
    prov: Prov
    binding: Binding | None
    span: Span


class Ctx:
    def __init__(self, registry: ContractRegistry, ceiling: frozenset[str],
                 authority: tuple[Authority, ...], grants: tuple[Grant, ...] | None,
                 kinds: Mapping[str, ResourceProtocol]) -> None:
        self.registry = registry
        # the resource kinds' tables, by kind: the only ones the rules read
        self.kinds = kinds
        self.ceiling = ceiling
        self.authority = authority
        self.grants = grants
        self.diagnostics: list[Diagnostic] = []
        self.effects: set[str] = set()
        self.contracts: dict[str, str] = {}
        # One footprint per enclosing branch or parallel loop body: key -> (what, first
        # exclusive use or first use, every use a shareable read).
        self.recorders: list[dict[str, Use]] = []
        self.sharing = False  # resolving a `reads` argument of a shareable contract
        self.snapshots: list[list[Env]] = []
        self.races: list[Span] = []
        self.conditions: list[tuple[str, Span]] = []
        self._counter = 0

    def report(self, code: DiagnosticCode, message: str, span: Span, help: str, *,
               required: str | None = None, actual: str | None = None,
               notes: Iterable[Note] = ()) -> None:
        self.diagnostics.append(
            Diagnostic(code, message, span, help, required, actual, tuple(notes)))

    def fresh(self, span: Span) -> str:
        self._counter += 1
        return f"v{self._counter}@{span.path}"

    def touch(self, key: str, display: str, span: Span, *, shared: bool = False) -> None:
        """Record a use of `key` in every enclosing footprint. A use is shared when it is a read
        argument of a shareable contract (docs/workflows.md#typing-rules); any other use makes
        the key exclusive, and the footprint then points at that use."""
        shared = shared or self.sharing
        for recorder in self.recorders:
            known = recorder.get(key)
            if known is None or (known.shared and not shared):
                recorder[key] = Use(display, span, shared)

    @contextmanager
    def shared_reads(self, on: bool) -> Iterator[None]:
        """While `on`, the uses `resolve` records are shared reads."""
        before, self.sharing = self.sharing, on
        try:
            yield
        finally:
            self.sharing = before

    def contract(self, name: str, span: Span) -> OperationContract | None:
        try:
            contract = self.registry.resolve(name)
        except Denial:
            known = ", ".join(sorted({c.qualified_name for c in self.registry})) or "none"
            self.report(D.UNKNOWN_OPERATION, f"no contract is registered for `{name}`", span,
                        "use a registered operation or register its contract first",
                        required="a registered operation", actual=name,
                        notes=[Note(f"registered: {known}")])
            return None
        self.contracts[contract.qualified_name] = contract.fingerprint
        return contract

    def charge(self, effects: Iterable[str], span: Span, what: str) -> bool:
        """Add `effects` to ε; report those beyond the declared ceiling
        (docs/workflows.md#typing-rules, docs/design.md#tool-sets)."""
        wanted = {str(effect) for effect in effects}
        self.effects |= wanted
        beyond = sorted(wanted - self.ceiling)
        if beyond:
            self.report(
                D.EFFECT_CEILING_EXCEEDED, f"{what} has effects beyond the workflow's ceiling",
                span, f"add {', '.join(beyond)} to `effects:` or remove the step",
                required=f"effects within {{{', '.join(sorted(self.ceiling))}}}",
                actual=f"{{{', '.join(sorted(wanted))}}}")
        return not beyond

    # -- values --------------------------------------------------------------------------------
    def resolve(self, env: Env, expr: Expr) -> Value:
        """The typed value of `expr`; reports unknown names and uses of consumed values."""
        if isinstance(expr, Literal):
            kind = "bool" if isinstance(expr.value, bool) else "json"
            return Value(DataT(kind), Prov.LITERAL, None, expr.span)
        binding = env.bindings.get(expr.name)
        poison = Value(PoisonT(), Prov.TRUSTED, None, expr.span)
        if binding is None:
            names = ", ".join(sorted(n for n, b in env.bindings.items() if b.gone is None))
            self.report(D.UNDEFINED_NAME, f"`{expr.name}` is not defined here", expr.span,
                        "bind it with an earlier step (`bind:`) on every path to this one",
                        notes=[Note(f"in scope: {names or 'nothing'}")])
            return poison
        if binding.gone is not None:
            self._report_gone(binding, expr.span)
            return poison
        if isinstance(binding.type, AFFINE):
            self.touch(f"b:{binding.vid}", f"`{binding.name}`", expr.span)
        if isinstance(binding.type, HandleT):
            self.touch(f"r:{binding.type.rid}", f"`{binding.name}`", expr.span)
        vtype: VType = binding.type
        if expr.fields:
            if binding.type != DataT("json"):
                if not isinstance(binding.type, PoisonT):
                    self.report(D.TYPE_MISMATCH, f"`{expr}`: only JSON data has fields",
                                expr.span, f"use `${binding.name}` itself",
                                required="JSON data", actual=describe(binding.type))
                return poison
            vtype = DataT("json")
        return Value(vtype, binding.prov, binding, expr.span)

    def _report_gone(self, binding: Binding, span: Span) -> None:
        gone = binding.gone
        assert gone is not None
        notes = [] if gone.at is None else [Note("here", gone.at)]
        if gone.code is D.CONSUMED_PERMIT:
            self.report(gone.code, f"`{binding.name}` was already consumed", span,
                        "an affine value is used at most once; obtain a new one (a new "
                        "approval, or the handle the consuming step returned)",
                        required=f"a live {_bare(describe(binding.type))}",
                        actual=gone.reason, notes=notes)
        else:
            self.report(gone.code, f"`{binding.name}` is not available after the join",
                        span, "make every path consume it or none; differing states need a "
                        "tagged outcome and an exhaustive match",
                        required="the same ownership and state on every path",
                        actual=gone.reason, notes=notes)

    def expect(self, env: Env, expr: Expr, kind: type[VType], what: str,
               required: str) -> Value | None:
        """`expr` as a trusted value of `kind`, else report (forged, wrong kind) and None."""
        value = self.resolve(env, expr)
        if isinstance(value.type, PoisonT):
            return None
        if isinstance(value.type, kind) and (value.prov is Prov.TRUSTED or kind is DataT):
            return value
        origin = value.binding.origin if value.binding else value.span
        if value.prov is not Prov.TRUSTED and kind is not DataT:
            self.report(D.FORGED_VALUE, f"`{expr}` is not {what}: it comes from "
                        f"{SOURCE[value.prov]}", expr.span,
                        f"only trusted steps mint {_bare(what)}s; {APPROVAL_HELP}"
                        if kind is PermitT else f"only trusted steps mint {_bare(what)}s",
                        required=required,
                        actual=f"{describe(value.type)} from {SOURCE[value.prov]}",
                        notes=[Note("produced here", origin)])
        elif kind is PermitT and value.type == DataT("bool"):
            self.report(D.UNBOUND_APPROVAL, f"`{expr}` is a boolean, not a permit", expr.span,
                        "a boolean approval is not a permit (docs/design.md#permits); "
                        f"{APPROVAL_HELP}",
                        required=required, actual="a bool")
        else:
            self.report(D.TYPE_MISMATCH, f"`{expr}` is not {what}", expr.span,
                        f"pass {what} here", required=required, actual=describe(value.type))
        return None


def _bare(text: str) -> str:
    """`an approval decision` -> `approval decision`."""
    for article in ("a ", "an "):
        if text.startswith(article):
            return text[len(article):]
    return text


def bind(ctx: Ctx, env: Env, name: str | None, vtype: VType, prov: Prov, span: Span,
         vid: str | None = None) -> str:
    value_id = vid or ctx.fresh(span)
    if name is not None:
        env.bind(Binding(name, value_id, vtype, prov, span))
    return value_id


def repeatable(contract: OperationContract) -> bool:
    """A dispatch that may run again for the same proposal: an idempotent, unapproved read."""
    return (contract.approval_requirement is None
            and contract.idempotency_contract is Idempotency.IDEMPOTENT)
