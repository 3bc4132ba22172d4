"""Reading located YAML/JSON nodes into IR values: shapes, names, references, literals.

`Shapes` is the part of the workflow reader that knows no step kinds: it checks a node's shape
(mapping with known keys, string, name, integer, list of strings) and reads field values as
`Ref` (`$name`, `$name.field`) or `Literal` (any other JSON; `$$` escapes a literal `$`).
Every failure is a `Malformed` carrying the node's line and column and its step path.
"""

from __future__ import annotations

import re
from typing import Final

from protocols.workflow.ir import Expr, Literal, Ref, Span
from protocols.workflow.located import Node, Pos

NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
REF: Final = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z_][A-Za-z0-9_-]*)*)\Z")


class Malformed(Exception):
    def __init__(self, message: str, span: Span, help: str = "") -> None:
        self.message, self.span, self.help = message, span, help
        super().__init__(message)


class Shapes:
    """Shape checks for one file; subclasses add the document and step grammar."""

    def __init__(self, filename: str) -> None:
        self.file = filename

    def span(self, path: str, pos: Pos) -> Span:
        return Span(path, self.file, pos.line, pos.column, pos.end_line, pos.end_column)

    def fail(self, message: str, path: str, pos: Pos, help: str = "") -> Malformed:
        return Malformed(message, self.span(path, pos), help)

    # -- shapes --------------------------------------------------------------------------------
    def mapping(self, node: Node, path: str, allowed: frozenset[str] | set[str]) -> Node:
        if node.kind != "map":
            raise self.fail(f"{path} must be a mapping", path, node.pos)
        for entry in node.entries:
            if entry.key not in allowed and not entry.key.startswith("x-"):
                expected = ", ".join(sorted(allowed)) or "nothing else"
                raise self.fail(f"unknown field {entry.key!r} in {path}", path, entry.key_pos,
                                f"expected one of: {expected}")
        return node

    def text(self, node: Node | None, path: str, *, pos: Pos) -> str:
        if node is None or node.kind != "scalar" or not isinstance(node.scalar, str):
            raise self.fail(f"{path} must be a string", path, node.pos if node else pos)
        return node.scalar

    def name(self, node: Node | None, path: str, *, pos: Pos) -> str:
        value = self.text(node, path, pos=pos)
        if not NAME.match(value):
            raise self.fail(f"{path}: {value!r} is not a valid name", path,
                            node.pos if node else pos, "names are letters, digits and _")
        return value

    def opt_name(self, node: Node | None, path: str, pos: Pos) -> str | None:
        return None if node is None else self.name(node, path, pos=pos)

    def integer(self, node: Node, path: str) -> int:
        if node.kind != "scalar" or isinstance(node.scalar, bool) or not isinstance(
                node.scalar, int) or node.scalar < 0:
            raise self.fail(f"{path} must be a non-negative integer", path, node.pos)
        return node.scalar

    def strings(self, node: Node | None, path: str, pos: Pos) -> tuple[str, ...]:
        if node is None:
            return ()
        if node.kind != "list":
            raise self.fail(f"{path} must be a list of strings", path, node.pos)
        return tuple(self.text(item, f"{path}[{i}]", pos=item.pos)
                     for i, item in enumerate(node.items))

    def expr(self, node: Node, path: str) -> Expr:
        span = self.span(path, node.pos)
        if node.kind == "scalar" and isinstance(node.scalar, str) and node.scalar.startswith("$"):
            if node.scalar.startswith("$$"):
                return Literal(node.scalar[1:], span)
            match = REF.match(node.scalar)
            if match is None:
                raise self.fail(f"{node.scalar!r} is not a valid reference", path, node.pos,
                                "write $name or $name.field; escape a literal $ as $$")
            fields = tuple(f for f in match.group(2).split(".") if f)
            return Ref(match.group(1), fields, span)
        return Literal(self.literal(node, path), span)

    def literal(self, node: Node, path: str) -> object:
        if node.kind == "map":
            return {e.key: self.literal(e.value, f"{path}.{e.key}") for e in node.entries}
        if node.kind == "list":
            return [self.literal(item, f"{path}[{i}]") for i, item in enumerate(node.items)]
        value = node.scalar
        if isinstance(value, str) and value.startswith("$"):
            if value.startswith("$$"):
                return value[1:]
            raise self.fail("references are allowed only as whole values", path, node.pos,
                            "bind the value with a step and pass $name, or escape $ as $$")
        return value

    def exprs(self, node: Node | None, path: str) -> tuple[tuple[str, Expr], ...]:
        if node is None:
            return ()
        if node.kind != "map":
            raise self.fail(f"{path} must be a mapping of names to values", path, node.pos)
        return tuple((e.key, self.expr(e.value, f"{path}.{e.key}")) for e in node.entries)
