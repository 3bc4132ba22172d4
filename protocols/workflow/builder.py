"""`WorkflowBuilder`: build the workflow IR from Python (docs/design.md#extensions), recording step
paths.

    wf = (WorkflowBuilder("refund", effects={"human", "external_write"})
          .authority(["email.send"], {"mailbox": ["support@acme.example"]})
          .handle("draft", "email_draft")
          .propose("email.send", draft=ref("draft"), bind="proposal")
          .request_approval(ref("proposal"), bind="decision")
          .match(ref("decision"),
                 Granted=arm(lambda b: b.dispatch(ref("proposal"), permit=ref("permit")),
                             permit="permit"),
                 Denied=arm())
          .build())

Every step gets the path it would have in a file (`steps[3]`, `steps[3].then[0]`,
`steps[2].arms.Granted[0]`), so diagnostics point at builder code as precisely as at files.
Plain Python values are literals (data, never authority); `ref("name")` or `ref("msg.field")`
refers to a binding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Self

from protocols.expiry import BEYOND_ANY_DATE, LONGEST_EXPIRY
from protocols.grants import parse_scope
from protocols.workflow.ir import (
    AgentCall,
    Approve,
    Arm,
    Authority,
    Block,
    Branch,
    Create,
    Delegate,
    Dispatch,
    Edit,
    Expr,
    If,
    Input,
    Let,
    Literal,
    Loop,
    Match,
    Parallel,
    Propose,
    Race,
    Receive,
    Ref,
    RequestApproval,
    Span,
    Step,
    Try,
    Workflow,
)


@dataclass(frozen=True)
class RefSpec:
    """A reference made by `ref()`; it gets its span when a step uses it."""

    name: str
    fields: tuple[str, ...] = ()


def ref(dotted: str) -> RefSpec:
    """`ref("proposal")` or `ref("message.permit")`: a use of an earlier binding."""
    name, *fields = dotted.removeprefix("$").split(".")
    return RefSpec(name, tuple(fields))


BlockFn = Callable[["BlockBuilder"], object]


@dataclass(frozen=True)
class ArmSpec:
    body: BlockFn | None = None
    bindings: Mapping[str, str] = field(default_factory=dict)


def arm(body: BlockFn | None = None, **bindings: str) -> ArmSpec:
    """A match arm: `arm(lambda b: ..., permit="permit")` binds the arm's `permit` field."""
    return ArmSpec(body, bindings)


class BlockBuilder:
    """Appends steps to one block; nested blocks are built by callbacks."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._steps: list[Step] = []

    def _span(self) -> Span:
        return Span(f"{self._path}[{len(self._steps)}]")

    def _expr(self, value: object, span: Span, suffix: str) -> Expr:
        if isinstance(value, RefSpec):
            return Ref(value.name, value.fields, span.child(suffix))
        return Literal(value, span.child(suffix))

    def _block(self, body: BlockFn | None, path: str) -> Block:
        child = BlockBuilder(path)
        if body is not None:
            body(child)
        return tuple(child._steps)

    def _add(self, step: Step) -> Self:
        self._steps.append(step)
        return self

    def propose(self, operation: str, *, bind: str | None = None, **args: object) -> Self:
        span = self._span()
        exprs = tuple((k, self._expr(v, span, f".args.{k}")) for k, v in args.items())
        return self._add(Propose(operation, exprs, bind, span))

    def request_approval(self, proposal: object, *, bind: str | None = None,
                         role: str | None = None, expires: int | None = None) -> Self:
        span = self._span()
        return self._add(RequestApproval(self._expr(proposal, span, ""), bind, span, role,
                                         expires))

    def approve(self, prompt: str, *, bind: str | None = None) -> Self:
        return self._add(Approve(prompt, bind, self._span()))

    def dispatch(self, proposal: object, *, permit: object = None, retry: int | None = None,
                 bind: str | None = None) -> Self:
        span = self._span()
        permit_expr = None if permit is None else self._expr(permit, span, ".permit")
        return self._add(Dispatch(self._expr(proposal, span, ""), permit_expr, bind, span, retry))

    def create(self, kind: str, payload: object, *, bind: str | None = None) -> Self:
        span = self._span()
        return self._add(Create(kind, self._expr(payload, span, ".payload"), bind, span))

    def edit(self, handle: object, payload: object, *, bind: str | None = None) -> Self:
        span = self._span()
        return self._add(Edit(self._expr(handle, span, ""),
                              self._expr(payload, span, ".payload"), bind, span))

    def let(self, name: str, value: object) -> Self:
        span = self._span()
        return self._add(Let(name, self._expr(value, span, ".value"), span))

    def receive(self, source: str = "host", *, bind: str | None = None) -> Self:
        return self._add(Receive(source, bind, self._span()))

    def agent(self, name: str, *, tools: Iterable[str] | None = None,
              input: Mapping[str, object] | None = None, returns: str = "json",
              bind: str | None = None, delegate: Mapping[str, object] | None = None) -> Self:
        """`delegate`: `{"operations": [...], "scope": {...}, "expires_in": S, "budget": N}`
        (docs/design.md#delegation); the tools then default to the delegated operations."""
        span = self._span()
        inputs = tuple((k, self._expr(v, span, f".input.{k}"))
                       for k, v in (input or {}).items())
        bounded = None if delegate is None else _delegate(delegate, span.child(".delegate"))
        chosen = tuple(tools) if tools is not None else (
            bounded.operations if bounded is not None else ())
        return self._add(AgentCall(name, chosen, inputs, returns, bind, span,
                                   delegate=bounded))

    def if_(self, condition: object, then: BlockFn | None = None,
            else_: BlockFn | None = None) -> Self:
        span = self._span()
        return self._add(If(self._expr(condition, span, ""),
                            self._block(then, f"{span.path}.then"),
                            self._block(else_, f"{span.path}.else"), span))

    def match(self, subject: object, **arms: ArmSpec) -> Self:
        span = self._span()
        built = tuple(
            Arm(tag.lower(), tuple(spec.bindings.items()),
                self._block(spec.body, f"{span.path}.arms.{tag}"),
                span.child(f".arms.{tag}"))
            for tag, spec in arms.items())
        return self._add(Match(self._expr(subject, span, ""), built, span))

    def loop(self, body: BlockFn, *, times: int | None = None, over: object = None,
             item: str = "item", parallel: bool = False) -> Self:
        span = self._span()
        block = self._block(body, f"{span.path}.do")
        if over is None:
            return self._add(Loop(block, span, times=times or 0, parallel=parallel))
        return self._add(Loop(block, span, over=self._expr(over, span, ""), item=item,
                              parallel=parallel))

    def try_(self, body: BlockFn, *, catch: BlockFn | None = None, result: object = None,
             fallback: object = None, bind: str | None = None) -> Self:
        span = self._span()
        return self._add(Try(
            self._block(body, f"{span.path}.try"),
            None if catch is None else self._block(catch, f"{span.path}.catch"), span,
            result=None if result is None else self._expr(result, span, ".result"),
            fallback=None if fallback is None else self._expr(fallback, span, ".fallback"),
            bind=bind))

    def _branches(self, kind: str, span: Span, branches: Mapping[str, BlockFn]) -> tuple[
            Branch, ...]:
        return tuple(Branch(name, self._block(fn, f"{span.path}.{kind}.{name}"),
                            span.child(f".{kind}.{name}")) for name, fn in branches.items())

    def parallel(self, **branches: BlockFn) -> Self:
        span = self._span()
        return self._add(Parallel(self._branches("parallel", span, branches), span))

    def race(self, **branches: BlockFn) -> Self:
        span = self._span()
        return self._add(Race(self._branches("race", span, branches), span))


class WorkflowBuilder(BlockBuilder):
    """The top-level builder: header (effects, authority, inputs) and the `steps` block."""

    def __init__(self, name: str, *, effects: Iterable[str] = ()) -> None:
        super().__init__("steps")
        self._name = name
        self._effects = frozenset(effects)
        self._authority: list[Authority] = []
        self._inputs: list[Input] = []

    def effects(self, *names: str) -> Self:
        self._effects |= frozenset(names)
        return self

    def authority(self, operations: Iterable[str], scope: Mapping[str, object]) -> Self:
        """Declare a grant kind; `scope` in its JSON form (`{"mailbox": ["a@x"]}`)."""
        span = Span(f"authority[{len(self._authority)}]")
        self._authority.append(Authority(frozenset(operations), parse_scope(scope), span))
        return self

    def input(self, name: str, kind: str = "json") -> Self:
        self._inputs.append(Input(name, kind, Span(f"inputs.{name}")))
        return self

    def handle(self, name: str, resource: str, *, state: str | None = None,
               payload: object = None) -> Self:
        self._inputs.append(Input(name, "handle", Span(f"inputs.{name}"), resource=resource,
                                  state=state, payload=payload))
        return self

    def build(self) -> Workflow:
        return Workflow(self._name, self._effects, tuple(self._authority), tuple(self._inputs),
                        tuple(self._steps), Span("workflow"))


def _delegate(raw: Mapping[str, object], span: Span) -> Delegate:
    """The builder's `delegate=` mapping as the file format reads it; a bad shape is a
    `ValueError` (a builder is code: its mistakes raise)."""
    if set(raw) != {"operations", "scope", "expires_in", "budget"}:
        raise ValueError("delegate takes exactly operations, scope, expires_in and budget")
    operations, scope = raw["operations"], raw["scope"]
    expires_in, budget = raw["expires_in"], raw["budget"]
    if isinstance(operations, str) or not isinstance(operations, Iterable) \
            or not operations or "*" in operations:
        raise ValueError("delegate operations: at least one operation name, never '*'")
    if not isinstance(scope, Mapping):
        raise ValueError("delegate scope: a mapping of authority keys to values")
    for name, count, least in (("expires_in", expires_in, 1), ("budget", budget, 0)):
        if isinstance(count, bool) or not isinstance(count, int) or count < least:
            raise ValueError(f"delegate {name}: an integer of at least {least}")
    assert isinstance(expires_in, int) and isinstance(budget, int)  # checked just above
    if expires_in > LONGEST_EXPIRY:
        raise ValueError(f"delegate expires_in {BEYOND_ANY_DATE}")
    return Delegate(tuple(str(o) for o in operations), parse_scope(scope), expires_in, budget,
                    span)
