"""The workflow intermediate representation (docs/workflows.md#typing-rules,
docs/design.md#extensions "WorkflowBuilder").

One IR serves both front ends: `WorkflowBuilder` (Python) and the declarative file format
(`parse_workflow`). Every node is a frozen dataclass and carries a `Span`: the file, line and
column it was read from (files) and always the step path (`steps[3].then[0]`), so diagnostics
can point at the exact place whichever front end built it.

Values in step fields are `Ref`s (a name bound earlier, optionally with JSON field access:
`$message.permit`) or `Literal`s (JSON written in the workflow). Literals are never permits,
handles, proposals or decisions: only trusted steps mint those (docs/design.md#resources,
docs/workflows.md#typing-rules).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TypeAlias

from protocols.grants import Scope

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Span:
    """Where a node came from: `line`/`column` are where it starts and `end_line`/`end_column`
    just after where it ends (exclusive), 1-based; 0 when unknown (builder sources, and the
    end of a syntax error)."""

    path: str
    file: str | None = None
    line: int = 0
    column: int = 0
    end_line: int = 0
    end_column: int = 0

    def child(self, suffix: str) -> Span:
        """A span for a field of this node; keeps the region when no finer one is known."""
        return Span(f"{self.path}{suffix}", self.file, self.line, self.column,
                    self.end_line, self.end_column)

    def where(self) -> str:
        """`file:line:col` for file sources, else `name:path` for builder sources."""
        if self.line:
            return f"{self.file or '<workflow>'}:{self.line}:{self.column}"
        return f"{self.file or '<builder>'}:{self.path}"


@dataclass(frozen=True)
class Ref:
    """A reference to a binding, with optional JSON field access (`msg.permit`)."""

    name: str
    fields: tuple[str, ...]
    span: Span

    def __str__(self) -> str:
        return "$" + ".".join((self.name, *self.fields))


@dataclass(frozen=True)
class Literal:
    """A JSON value written in the workflow itself: data, never authority."""

    value: object = field(hash=False)
    span: Span = field(default_factory=lambda: Span("?"))

    def __str__(self) -> str:
        text = json.dumps(self.value, ensure_ascii=False, default=str)
        return text if len(text) <= 60 else text[:57] + "..."


Expr: TypeAlias = Ref | Literal


@dataclass(frozen=True)
class Authority:
    """A declared grant kind: operations (`"*"` for all) over a scope (docs/design.md#grants)."""

    operations: frozenset[str]
    scope: Scope = field(hash=False)
    span: Span


@dataclass(frozen=True)
class Input:
    """A workflow parameter. `kind` is `handle`, `bool`, `json` (or a refused trusted kind)."""

    name: str
    kind: str
    span: Span
    resource: str | None = None
    state: str | None = None
    payload: object = field(default=None, hash=False)


@dataclass(frozen=True)
class Propose:
    operation: str
    args: tuple[tuple[str, Expr], ...]
    bind: str | None
    span: Span


@dataclass(frozen=True)
class RequestApproval:
    proposal: Expr
    bind: str | None
    span: Span
    role: str | None = None
    expires: int | None = None


@dataclass(frozen=True)
class Approve:
    """The legacy `approve`: a plain Bool, never evidence of authorization
    (docs/workflows.md#typing-rules)."""

    prompt: str
    bind: str | None
    span: Span


@dataclass(frozen=True)
class Dispatch:
    proposal: Expr
    permit: Expr | None
    bind: str | None
    span: Span
    retry: int | None = None


@dataclass(frozen=True)
class Create:
    kind: str
    payload: Expr
    bind: str | None
    span: Span


@dataclass(frozen=True)
class Edit:
    handle: Expr
    payload: Expr
    bind: str | None
    span: Span


@dataclass(frozen=True)
class Let:
    bind: str
    value: Expr
    span: Span


@dataclass(frozen=True)
class Receive:
    """An untrusted message from the host (user, webhook): JSON data, never authority."""

    source: str
    bind: str | None
    span: Span


@dataclass(frozen=True)
class Delegate:
    """A bounded delegation (docs/design.md#delegation): the child grant an agent step runs its
    sub-agent under, narrower than the workflow's own (`operations` over `scope`, valid `expires_in`
    seconds), with `budget` units carved out of the workflow run's budget."""

    operations: tuple[str, ...]
    scope: Scope = field(hash=False)
    expires_in: int = 0
    budget: int = 0
    span: Span = field(default_factory=lambda: Span("?"))


@dataclass(frozen=True)
class AgentCall:
    """A model-driven agent that may call any tool in `tools` (docs/design.md#tool-sets); with
    `delegate`, it runs as a sub-agent under a delegated grant (docs/design.md#delegation)."""

    agent: str
    tools: tuple[str, ...]
    inputs: tuple[tuple[str, Expr], ...]
    returns: str
    bind: str | None
    span: Span
    delegate: Delegate | None = None


@dataclass(frozen=True)
class If:
    condition: Expr
    then: Block
    orelse: Block
    span: Span


@dataclass(frozen=True)
class Arm:
    """`tag` is lowercased (`granted`, `denied`, `completed`, ...); `_` matches the rest."""

    tag: str
    bindings: tuple[tuple[str, str], ...]
    body: Block
    span: Span


@dataclass(frozen=True)
class Match:
    subject: Expr
    arms: tuple[Arm, ...]
    span: Span


@dataclass(frozen=True)
class Loop:
    """`times` repetitions or one per item of `over` (bound to `item`); `parallel` maps."""

    body: Block
    span: Span
    times: int | None = None
    over: Expr | None = None
    item: str | None = None
    parallel: bool = False


@dataclass(frozen=True)
class Try:
    """Run `body`; on failure run `catch` and bind `fallback` (if any) instead of `result`."""

    body: Block
    catch: Block | None
    span: Span
    result: Expr | None = None
    fallback: Expr | None = None
    bind: str | None = None


@dataclass(frozen=True)
class Branch:
    name: str
    body: Block
    span: Span


@dataclass(frozen=True)
class Parallel:
    branches: tuple[Branch, ...]
    span: Span


@dataclass(frozen=True)
class Race:
    branches: tuple[Branch, ...]
    span: Span


Step: TypeAlias = (
    Propose | RequestApproval | Approve | Dispatch | Create | Edit | Let | Receive | AgentCall
    | If | Match | Loop | Try | Parallel | Race
)
Block: TypeAlias = tuple[Step, ...]


@dataclass(frozen=True)
class Workflow:
    """A whole workflow: its effect ceiling, declared authority, inputs and steps."""

    name: str
    effects: frozenset[str]
    authority: tuple[Authority, ...]
    inputs: tuple[Input, ...]
    steps: Block
    span: Span
    version: int = FORMAT_VERSION
