"""The declarative workflow format, version 1 (docs/workflows.md), read into the IR.

`parse_workflow(text, filename=...)` returns a `Workflow` or `Diagnostics` holding one
AGL-E017 (malformed workflow) at the offending line and column; it never raises for bad input.
Every span keeps the file, the region (start and end) of the node it was read from and the step
path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, cast

from protocols.denials import DiagnosticCode
from protocols.expiry import BEYOND_ANY_DATE, LONGEST_EXPIRY
from protocols.grants import parse_scope
from protocols.workflow.diagnostics import Diagnostic, Diagnostics
from protocols.workflow.ir import (
    FORMAT_VERSION,
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
    Loop,
    Match,
    Parallel,
    Propose,
    Race,
    Receive,
    RequestApproval,
    Span,
    Step,
    Try,
    Workflow,
)
from protocols.workflow.located import Node, SyntaxProblem, load_located
from protocols.workflow.shapes import Malformed, Shapes

DELEGATE_KEYS: Final = frozenset({"operations", "scope", "expires_in", "budget"})
TOP_KEYS: Final = {"version", "name", "effects", "authority", "inputs", "steps"}
STEP_KEYS: Final[dict[str, frozenset[str]]] = {
    "propose": frozenset({"args", "bind"}),
    "request_approval": frozenset({"role", "expires", "bind"}),
    "approve": frozenset({"bind"}),
    "dispatch": frozenset({"permit", "retry", "bind"}),
    "create": frozenset({"payload", "bind"}),
    "edit": frozenset({"payload", "bind"}),
    "let": frozenset({"value"}),
    "receive": frozenset({"bind"}),
    "agent": frozenset({"tools", "input", "returns", "bind", "delegate"}),
    "if": frozenset({"then", "else"}),
    "match": frozenset({"arms"}),
    "loop": frozenset({"as", "parallel", "do"}),
    "try": frozenset({"catch", "result", "fallback", "bind"}),
    "parallel": frozenset(),
    "race": frozenset(),
}


def parse_workflow(text: str, *, filename: str = "<workflow>.yaml") -> Workflow | Diagnostics:
    """Read a version 1 workflow from YAML or JSON text (chosen by `filename`'s extension)."""
    try:
        root = load_located(text, filename)
        return _Reader(filename).workflow(root)
    except SyntaxProblem as exc:
        span = Span("<document>", filename, exc.pos.line, exc.pos.column)
        return _malformed(str(exc), span, "fix the syntax error")
    except Malformed as exc:
        return _malformed(exc.message, exc.span, exc.help or "see docs/workflows.md for the format")


def _malformed(message: str, span: Span, help: str) -> Diagnostics:
    return Diagnostics.of([Diagnostic(DiagnosticCode.MALFORMED_WORKFLOW, message, span, help)])


class _Reader(Shapes):
    # -- document ------------------------------------------------------------------------------
    def workflow(self, root: Node) -> Workflow:
        self.mapping(root, "workflow", TOP_KEYS)
        version = root.get("version")
        if version is None or version.scalar != FORMAT_VERSION or isinstance(version.scalar, bool):
            raise self.fail(f"version must be {FORMAT_VERSION}", "version",
                            version.pos if version else root.pos, "add `version: 1`")
        name = self.text(root.get("name"), "name", pos=root.pos)
        effects = frozenset(self.strings(root.get("effects"), "effects", root.pos))
        steps_node = root.get("steps")
        if steps_node is None:
            raise self.fail("a workflow needs `steps`", "steps", root.pos)
        return Workflow(
            name=name, effects=effects, authority=self.authority(root.get("authority")),
            inputs=self.inputs(root.get("inputs")), steps=self.block(steps_node, "steps"),
            span=self.span("workflow", root.pos))

    def authority(self, node: Node | None) -> tuple[Authority, ...]:
        if node is None:
            return ()
        if node.kind != "list":
            raise self.fail("authority must be a list", "authority", node.pos)
        result = []
        for i, item in enumerate(node.items):
            path = f"authority[{i}]"
            self.mapping(item, path, {"operations", "scope"})
            operations = frozenset(self.strings(item.get("operations"), path, item.pos))
            if not operations:
                raise self.fail(f"{path} needs operations", path, item.pos)
            scope_node = item.get("scope")
            raw = {} if scope_node is None else scope_node.plain()
            try:
                scope = parse_scope(cast(Mapping[str, Any], raw))
            except ValueError as exc:
                where = scope_node.pos if scope_node else item.pos
                raise self.fail(str(exc), path, where) from None
            result.append(Authority(operations, scope, self.span(path, item.pos)))
        return tuple(result)

    def inputs(self, node: Node | None) -> tuple[Input, ...]:
        if node is None:
            return ()
        if node.kind != "map":
            raise self.fail("inputs must be a mapping of names to types", "inputs", node.pos)
        result = []
        for entry in node.entries:
            path = f"inputs.{entry.key}"
            self.name(Node(entry.key_pos, "scalar", scalar=entry.key), path, pos=entry.key_pos)
            span, value = self.span(path, entry.key_pos), entry.value
            if value.kind == "scalar":
                result.append(Input(entry.key, self.text(value, path, pos=value.pos), span))
                continue
            self.mapping(value, path, {"handle", "state", "payload", "type"})
            handle = value.get("handle")
            if handle is not None:
                state = value.get("state")
                payload = value.get("payload")
                result.append(Input(
                    entry.key, "handle", span, resource=self.text(handle, path, pos=value.pos),
                    state=None if state is None else self.text(state, path, pos=state.pos),
                    payload=None if payload is None else self.literal(payload, path)))
            else:
                result.append(Input(entry.key, self.text(value.get("type"), f"{path}.type",
                                                         pos=value.pos), span))
        return tuple(result)

    def block(self, node: Node, path: str) -> Block:
        if node.kind == "scalar" and node.scalar is None:
            return ()
        if node.kind != "list":
            raise self.fail(f"{path} must be a list of steps", path, node.pos)
        return tuple(self.step(item, f"{path}[{i}]") for i, item in enumerate(node.items))

    def step(self, node: Node, path: str) -> Step:
        if node.kind != "map":
            raise self.fail("a step must be a mapping", path, node.pos)
        heads = [e for e in node.entries if e.key in STEP_KEYS]
        if any(e.key == "loop" for e in heads):  # `parallel: true` is an option of a loop
            heads = [e for e in heads if e.key == "loop"]
        if len(heads) != 1:
            raise self.fail(f"a step needs exactly one of: {', '.join(STEP_KEYS)}", path,
                            node.pos)
        head = heads[0]
        self.mapping(node, path, STEP_KEYS[head.key] | {head.key})
        span = self.span(path, head.key_pos)
        return self.BUILDERS[head.key](self, node, head.value, span)

    # -- step kinds ----------------------------------------------------------------------------
    def _bind(self, node: Node, span: Span) -> str | None:
        return self.opt_name(node.get("bind"), f"{span.path}.bind", node.pos)

    def propose(self, node: Node, head: Node, span: Span) -> Step:
        return Propose(self.text(head, span.path, pos=head.pos),
                       self.exprs(node.get("args"), f"{span.path}.args"),
                       self._bind(node, span), span)

    def request_approval(self, node: Node, head: Node, span: Span) -> Step:
        role, expires = node.get("role"), node.get("expires")
        return RequestApproval(
            self.expr(head, span.path), self._bind(node, span), span,
            role=None if role is None else self.text(role, f"{span.path}.role", pos=role.pos),
            expires=None if expires is None else self.integer(expires, f"{span.path}.expires"))

    def approve(self, node: Node, head: Node, span: Span) -> Step:
        return Approve(self.text(head, span.path, pos=head.pos), self._bind(node, span), span)

    def dispatch(self, node: Node, head: Node, span: Span) -> Step:
        permit, retry = node.get("permit"), node.get("retry")
        return Dispatch(
            self.expr(head, span.path),
            None if permit is None else self.expr(permit, f"{span.path}.permit"),
            self._bind(node, span), span,
            retry=None if retry is None else self.integer(retry, f"{span.path}.retry"))

    def _payload(self, node: Node, span: Span) -> Expr:
        payload = node.get("payload")
        if payload is None:
            raise self.fail("needs a payload", span.path, node.pos)
        return self.expr(payload, f"{span.path}.payload")

    def create(self, node: Node, head: Node, span: Span) -> Step:
        return Create(self.text(head, span.path, pos=head.pos), self._payload(node, span),
                      self._bind(node, span), span)

    def edit(self, node: Node, head: Node, span: Span) -> Step:
        return Edit(self.expr(head, span.path), self._payload(node, span),
                    self._bind(node, span), span)

    def let(self, node: Node, head: Node, span: Span) -> Step:
        value = node.get("value")
        if value is None:
            raise self.fail("let needs a value", span.path, node.pos)
        return Let(self.name(head, span.path, pos=head.pos),
                   self.expr(value, f"{span.path}.value"), span)

    def receive(self, node: Node, head: Node, span: Span) -> Step:
        return Receive(self.text(head, span.path, pos=head.pos), self._bind(node, span), span)

    def agent(self, node: Node, head: Node, span: Span) -> Step:
        returns = node.get("returns")
        kind = "json" if returns is None else self.text(returns, span.path, pos=returns.pos)
        if kind not in ("json", "bool"):
            raise self.fail("returns must be json or bool", span.path, node.pos)
        delegate_node = node.get("delegate")
        delegate = None if delegate_node is None else self.delegate(
            delegate_node, f"{span.path}.delegate")
        tools = self.strings(node.get("tools"), f"{span.path}.tools", node.pos)
        if delegate is not None and node.get("tools") is None:
            tools = delegate.operations  # a delegated agent's tools default to what it holds
        return AgentCall(self.text(head, span.path, pos=head.pos), tools,
                         self.exprs(node.get("input"), f"{span.path}.input"), kind,
                         self._bind(node, span), span, delegate=delegate)

    def delegate(self, node: Node, path: str) -> Delegate:
        """`{operations, scope, expires_in, budget}`, all required (docs/design.md#evidence)."""
        self.mapping(node, path, DELEGATE_KEYS)
        fields = {key: node.get(key) for key in DELEGATE_KEYS}
        missing = sorted(key for key, value in fields.items() if value is None)
        if missing:
            raise self.fail(f"{path} needs {', '.join(missing)}", path, node.pos,
                            "a bounded delegation names operations, scope, expires_in and "
                            "budget")
        operations_node, scope_node = fields["operations"], fields["scope"]
        expires_node, budget_node = fields["expires_in"], fields["budget"]
        assert operations_node and scope_node and expires_node and budget_node  # none missing
        operations = self.strings(operations_node, f"{path}.operations", node.pos)
        if not operations or "*" in operations:
            raise self.fail(f"{path}.operations must name at least one operation, never \"*\"",
                            path, operations_node.pos,
                            "list the qualified operations the sub-agent may use")
        try:
            scope = parse_scope(cast(Mapping[str, Any], scope_node.plain()))
        except ValueError as exc:
            raise self.fail(str(exc), f"{path}.scope", scope_node.pos) from None
        expires_in = self.integer(expires_node, f"{path}.expires_in")
        if expires_in < 1:
            raise self.fail(f"{path}.expires_in must be at least 1 second", path,
                            expires_node.pos)
        if expires_in > LONGEST_EXPIRY:
            raise self.fail(f"{path}.expires_in {BEYOND_ANY_DATE}", f"{path}.expires_in",
                            expires_node.pos, "give the sub-agent's grant a validity in "
                            "seconds that ends before 9999-12-31, and within its parent's")
        return Delegate(operations, scope, expires_in,
                        self.integer(budget_node, f"{path}.budget"), self.span(path, node.pos))

    def if_(self, node: Node, head: Node, span: Span) -> Step:
        then, orelse = node.get("then"), node.get("else")
        return If(self.expr(head, span.path),
                  () if then is None else self.block(then, f"{span.path}.then"),
                  () if orelse is None else self.block(orelse, f"{span.path}.else"), span)

    def match(self, node: Node, head: Node, span: Span) -> Step:
        arms_node = node.get("arms")
        if arms_node is None or arms_node.kind != "map":
            raise self.fail("match needs `arms`: a mapping from tag to arm", span.path, node.pos)
        arms = []
        for entry in arms_node.entries:
            path = f"{span.path}.arms.{entry.key}"
            value = entry.value
            bindings: tuple[tuple[str, str], ...] = ()
            if value.kind == "map":
                self.mapping(value, path, {"bind", "do"})
                bind_node = value.get("bind")
                if bind_node is not None:
                    if bind_node.kind != "map":
                        raise self.fail("bind must map fields to names", path, bind_node.pos)
                    bindings = tuple((e.key, self.name(e.value, path, pos=e.value.pos))
                                     for e in bind_node.entries)
                body_node = value.get("do")
                body = () if body_node is None else self.block(body_node, path)
            else:
                body = self.block(value, path)
            arms.append(Arm(entry.key.lower(), bindings, body, self.span(path, entry.key_pos)))
        return Match(self.expr(head, span.path), tuple(arms), span)

    def loop(self, node: Node, head: Node, span: Span) -> Step:
        body_node, parallel = node.get("do"), node.get("parallel")
        body = () if body_node is None else self.block(body_node, f"{span.path}.do")
        is_parallel = parallel is not None and parallel.scalar is True
        if head.kind == "scalar" and isinstance(head.scalar, int) and not isinstance(
                head.scalar, bool):
            return Loop(body, span, times=self.integer(head, span.path), parallel=is_parallel)
        over = self.expr(head, span.path)
        item = self.opt_name(node.get("as"), f"{span.path}.as", node.pos) or "item"
        return Loop(body, span, over=over, item=item, parallel=is_parallel)

    def try_(self, node: Node, head: Node, span: Span) -> Step:
        catch, result, fallback = node.get("catch"), node.get("result"), node.get("fallback")
        if catch is None and fallback is None:
            raise self.fail("try needs a catch or a fallback", span.path, node.pos)
        bind = self._bind(node, span)
        if (bind is None) != (fallback is None and result is None):
            raise self.fail("try binds a value only with `bind`, `result` and `fallback`",
                            span.path, node.pos)
        return Try(
            self.block(head, f"{span.path}.try"),
            None if catch is None else self.block(catch, f"{span.path}.catch"), span,
            result=None if result is None else self.expr(result, f"{span.path}.result"),
            fallback=None if fallback is None else self.expr(fallback, f"{span.path}.fallback"),
            bind=bind)

    def branches(self, head: Node, span: Span, kind: str) -> tuple[Branch, ...]:
        if head.kind != "map" or len(head.entries) < 2:
            raise self.fail(f"{kind} needs a mapping of at least two named branches",
                            span.path, head.pos)
        return tuple(
            Branch(e.key, self.block(e.value, f"{span.path}.{kind}.{e.key}"),
                   self.span(f"{span.path}.{kind}.{e.key}", e.key_pos))
            for e in head.entries)

    def parallel(self, node: Node, head: Node, span: Span) -> Step:
        return Parallel(self.branches(head, span, "parallel"), span)

    def race(self, node: Node, head: Node, span: Span) -> Step:
        return Race(self.branches(head, span, "race"), span)

    BUILDERS: Final[dict[str, Callable[[_Reader, Node, Node, Span], Step]]] = {
        "propose": propose, "request_approval": request_approval, "approve": approve,
        "dispatch": dispatch, "create": create, "edit": edit, "let": let, "receive": receive,
        "agent": agent, "if": if_, "match": match, "loop": loop, "try": try_,
        "parallel": parallel, "race": race,
    }
