"""YAML and JSON read into trees that remember where every node starts and ends
(docs/workflows.md#diagnostic-codes spans).

`load_located(text, filename)` picks the syntax by extension: `.json` is read by the strict
positional JSON reader below (stdlib only); anything else as YAML through PyYAML's composer when
PyYAML is installed. Both produce `Node`s: mappings keep key order and key positions, duplicate
keys are refused (a silently dropped key could hide a step), and scalars are plain JSON values.

A node's `Pos` is its region: the 1-based line and column of its first character and of the
character just after its last one (SARIF's convention: the end column is exclusive). A scalar
ends after its last character (a quoted one after its closing quote), a JSON or flow collection
after its closing bracket, a block collection where its last member ends. A syntax error has a
start only (`end_line` and `end_column` are 0).
"""

from __future__ import annotations

import importlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, TypeAlias

yaml: Any
try:  # PyYAML is optional: JSON workflows need only the standard library.
    yaml = importlib.import_module("yaml")
except ImportError:  # pragma: no cover - exercised only where PyYAML is absent
    yaml = None

YAML_AVAILABLE = yaml is not None


@dataclass(frozen=True)
class Pos:
    """A region of the text: its start and its end (exclusive), 1-based; an end of 0 is unknown."""

    line: int
    column: int
    end_line: int = 0
    end_column: int = 0


@dataclass(frozen=True)
class Entry:
    key: str
    key_pos: Pos
    value: Node


@dataclass(frozen=True)
class Node:
    """A located value: `entries` for a mapping, `items` for a list, else `scalar`."""

    pos: Pos
    kind: str  # "map" | "list" | "scalar"
    scalar: object = field(default=None, hash=False)
    entries: tuple[Entry, ...] = ()
    items: tuple[Node, ...] = ()

    def get(self, key: str) -> Node | None:
        for entry in self.entries:
            if entry.key == key:
                return entry.value
        return None

    def plain(self) -> object:
        """The JSON value of this node, without positions."""
        if self.kind == "map":
            return {entry.key: entry.value.plain() for entry in self.entries}
        if self.kind == "list":
            return [item.plain() for item in self.items]
        return self.scalar


class SyntaxProblem(ValueError):
    """The text is not well-formed YAML/JSON; carries the 1-based position."""

    def __init__(self, message: str, pos: Pos) -> None:
        self.pos = pos
        super().__init__(message)


def load_located(text: str, filename: str) -> Node:
    """Parse `text` (JSON if `filename` ends in `.json`, else YAML) into a located tree."""
    if filename.lower().endswith(".json"):
        return _JsonReader(text).document()
    if yaml is None:  # pragma: no cover - see the import above
        raise SyntaxProblem("PyYAML is not installed; write the workflow as .json", Pos(1, 1))
    return _load_yaml(text)


# --- YAML -------------------------------------------------------------------------------------

YamlNode: TypeAlias = Any  # PyYAML ships no precise node types for its composer output


def _load_yaml(text: str) -> Node:
    assert yaml is not None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        pos = Pos(mark.line + 1, mark.column + 1) if mark is not None else Pos(1, 1)
        raise SyntaxProblem(f"invalid YAML: {exc.problem or exc}", pos) from None
    except yaml.YAMLError as exc:
        raise SyntaxProblem(f"invalid YAML: {exc}", Pos(1, 1)) from None
    if root is None:
        raise SyntaxProblem("the document is empty", Pos(1, 1))
    return _from_yaml(root, yaml.SafeLoader(""), depth=0)


def _yaml_pos(node: YamlNode) -> Pos:
    end = _yaml_end(node)
    return Pos(node.start_mark.line + 1, node.start_mark.column + 1, end.line + 1, end.column + 1)


def _yaml_end(node: YamlNode) -> Any:
    """The mark just after `node`'s last character. PyYAML ends a block collection where the
    next token starts (past trailing blank lines and comments), so it ends with its last member
    instead; a block scalar's end is moved back over the line breaks that follow its text."""
    assert yaml is not None
    if isinstance(node, yaml.MappingNode | yaml.SequenceNode) and not node.flow_style \
            and node.value:
        last = node.value[-1]
        return _yaml_end(last[1] if isinstance(node, yaml.MappingNode) else last)
    end = node.end_mark
    if isinstance(node, yaml.ScalarNode) and node.style in ("|", ">"):
        text, index = end.buffer, end.index
        while index > node.start_mark.index and text[index - 1] in "\r\n":
            index -= 1
        line_start = text.rfind("\n", 0, index) + 1
        return yaml.Mark(end.name, index, text.count("\n", 0, index), index - line_start,
                         None, None)
    return end


def _from_yaml(node: YamlNode, loader: Any, depth: int) -> Node:
    assert yaml is not None
    pos = _yaml_pos(node)
    if depth > 64:
        raise SyntaxProblem("nested too deeply", pos)
    if isinstance(node, yaml.MappingNode):
        entries: list[Entry] = []
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = _yaml_scalar(key_node, loader)
            if not isinstance(key, str):
                raise SyntaxProblem("mapping keys must be strings", _yaml_pos(key_node))
            if key in seen:
                raise SyntaxProblem(f"duplicate key {key!r}", _yaml_pos(key_node))
            seen.add(key)
            value = _from_yaml(value_node, loader, depth + 1)
            entries.append(Entry(key, _yaml_pos(key_node), value))
        return Node(pos, "map", entries=tuple(entries))
    if isinstance(node, yaml.SequenceNode):
        items = tuple(_from_yaml(item, loader, depth + 1) for item in node.value)
        return Node(pos, "list", items=items)
    return Node(pos, "scalar", scalar=_yaml_scalar(node, loader))


def _yaml_scalar(node: YamlNode, loader: Any) -> object:
    assert yaml is not None
    if not isinstance(node, yaml.ScalarNode):
        raise SyntaxProblem("expected a scalar", _yaml_pos(node))
    try:
        value = loader.construct_object(node, deep=True)
    except yaml.YAMLError as exc:
        raise SyntaxProblem(f"invalid scalar: {exc}", _yaml_pos(node)) from None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise SyntaxProblem(f"unsupported YAML value of type {type(value).__name__}", _yaml_pos(node))


# --- JSON -------------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_WHITESPACE = " \t\n\r"
_CONSTANTS: dict[str, object] = {"true": True, "false": False, "null": None}


class _JsonReader:
    """A strict RFC 8259 reader that records the line and column of every value."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.index = 0

    def document(self) -> Node:
        node = self.value(0)
        self.skip()
        if self.index != len(self.text):
            raise SyntaxProblem("extra data after the JSON value", self.pos())
        return node

    def pos(self) -> Pos:
        line = self.text.count("\n", 0, self.index) + 1
        return Pos(line, self.index - (self.text.rfind("\n", 0, self.index) + 1) + 1)

    def region(self, start: Pos) -> Pos:
        """`start` up to the current index, the end of what was just read."""
        end = self.pos()
        return Pos(start.line, start.column, end.line, end.column)

    def skip(self) -> None:
        while self.index < len(self.text) and self.text[self.index] in _WHITESPACE:
            self.index += 1

    def value(self, depth: int) -> Node:
        self.skip()
        pos = self.pos()
        if depth > 64:
            raise SyntaxProblem("nested too deeply", pos)
        char = self.text[self.index : self.index + 1]
        if char == "{":
            return self.mapping(pos, depth)
        if char == "[":
            return self.sequence(pos, depth)
        if char == '"':
            value = self.string()
            return Node(self.region(pos), "scalar", scalar=value)
        for word, constant in _CONSTANTS.items():
            if self.text.startswith(word, self.index):
                self.index += len(word)
                return Node(self.region(pos), "scalar", scalar=constant)
        match = _NUMBER.match(self.text, self.index)
        if match is None:
            raise SyntaxProblem("expected a JSON value", pos)
        self.index = match.end()
        number: object = json.loads(match.group())
        return Node(self.region(pos), "scalar", scalar=number)

    def string(self) -> str:
        try:
            value, end = json.decoder.scanstring(self.text, self.index + 1)  # type: ignore[attr-defined]  # not in typeshed
        except json.JSONDecodeError as exc:
            raise SyntaxProblem(f"invalid string: {exc.msg}", self.pos()) from None
        self.index = end
        return str(value)

    def expect(self, char: str) -> None:
        self.skip()
        if self.text[self.index : self.index + 1] != char:
            raise SyntaxProblem(f"expected {char!r}", self.pos())
        self.index += 1

    def mapping(self, pos: Pos, depth: int) -> Node:
        self.index += 1
        entries: list[Entry] = []
        self.skip()
        if self.text[self.index : self.index + 1] == "}":
            self.index += 1
            return Node(self.region(pos), "map")
        while True:
            self.skip()
            key_pos = self.pos()
            if self.text[self.index : self.index + 1] != '"':
                raise SyntaxProblem("expected a string key", key_pos)
            key = self.string()
            if any(entry.key == key for entry in entries):
                raise SyntaxProblem(f"duplicate key {key!r}", key_pos)
            key_pos = self.region(key_pos)
            self.expect(":")
            entries.append(Entry(key, key_pos, self.value(depth + 1)))
            self.skip()
            if self.text[self.index : self.index + 1] == "}":
                self.index += 1
                return Node(self.region(pos), "map", entries=tuple(entries))
            self.expect(",")

    def sequence(self, pos: Pos, depth: int) -> Node:
        self.index += 1
        items: list[Node] = []
        self.skip()
        if self.text[self.index : self.index + 1] == "]":
            self.index += 1
            return Node(self.region(pos), "list")
        while True:
            items.append(self.value(depth + 1))
            self.skip()
            if self.text[self.index : self.index + 1] == "]":
                self.index += 1
                return Node(self.region(pos), "list", items=tuple(items))
            self.expect(",")
