"""The workflow formatter: one canonical layout for format version 1 files
(docs/workflows.md#canonical-layout, normative).

`format_workflow(text, filename=...)` returns the canonical text of a workflow file, or the
parser's `Diagnostics` when the file is not a version 1 workflow the reader accepts (a formatter
never guesses at a file it cannot read). It changes layout only: the formatted file holds the
same JSON data (so it reads into the same IR) and, in YAML, the same comments. Before returning
it reads its own output back and raises `FormatError` if either differs: it never writes a file
that means something else or has lost a comment.

The layout follows the grammar's roles. The *structure* of a workflow (the document, the
`authority` list and its grants, `inputs`, every block of steps, every step, a match's `arms`
and each arm, the branches of a `parallel` or `race`, an agent's `delegate`) is written one
member per line. Everything else is *data* (`effects`, `args`, `payload`, `scope`, a literal, an
input's declaration, ...), written on one line in flow style when that line fits in `WIDTH`
columns and nothing inside it carries a comment, else one member per line with the same rule
for each member.

Pure: no Django, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from protocols.workflow.diagnostics import Diagnostics
from protocols.workflow.located import Node, Pos, load_located, yaml
from protocols.workflow.parse import STEP_KEYS, parse_workflow

WIDTH: Final = 100  # columns a flow-style line may take, its comment not counted
INDENT: Final = 2
_NO_WRAP: Final = float("inf")  # PyYAML's width: never fold a scalar

_STRUCTURE: Final = frozenset({"doc", "grants", "grant", "inputs", "block", "step", "arms", "arm",
                               "branches", "delegate"})
_BLOCK_FIELDS: Final = frozenset({"then", "else", "do", "catch"})
_LINE: Final = re.compile(r"[^\r\n\x85\u2028\u2029]*(?:\r\n|[\r\n\x85\u2028\u2029]|\Z)")
_LINE_END: Final = re.compile(r"(?:\r\n|[\r\n\x85\u2028\u2029])\Z")  # PyYAML's line breaks


class FormatError(ValueError):
    """The formatter's own output would not read back as its input: a bug, never written."""


def format_workflow(text: str, *, filename: str = "<workflow>.yaml") -> str | Diagnostics:
    """The canonical text of the workflow in `text` (YAML or JSON by `filename`'s extension),
    or the parser's diagnostics when it does not read as a version 1 workflow."""
    parsed = parse_workflow(text, filename=filename)
    if isinstance(parsed, Diagnostics):
        return parsed
    root = load_located(text, filename)
    is_json = filename.lower().endswith(".json")
    notes = _Notes() if is_json else _attach(_comments(text), root)
    tree = _tree(root, "doc", notes)
    out = _Json().document(tree) if is_json else _Yaml().document(tree, notes.trailer)
    _verify(text, out, filename, is_json)
    return out


def is_formatted(text: str, *, filename: str) -> bool | Diagnostics:
    """Whether `text` is already in the canonical layout (or the parser's diagnostics)."""
    result = format_workflow(text, filename=filename)
    return result if isinstance(result, Diagnostics) else result == text


# --- the tree to write: nodes with their roles and comments ------------------------------------

Line = str | None  # a comment line ("# ..."), or None for a blank line


@dataclass
class _El:
    """A value to write: a scalar, or a list or mapping of members, with its role."""

    node: Node
    role: str
    members: list[_Member] = field(default_factory=list)

    @property
    def structure(self) -> bool:
        return self.role in _STRUCTURE and self.node.kind != "scalar"

    def commented(self) -> bool:
        """Whether a comment sits on or before a member, at any depth."""
        return any(any(line is not None for line in m.leading) or m.trailing is not None
                   or m.value.commented() for m in self.members)


@dataclass
class _Member:
    key: str | None  # None for a list item
    value: _El
    leading: list[Line] = field(default_factory=list)
    trailing: str | None = None


@dataclass
class _Notes:
    """Comments attached to members by their start (key position for an entry, value position
    for an item), and those after the last member."""

    leading: dict[tuple[str, int, int], list[Line]] = field(default_factory=dict)
    trailing: dict[tuple[str, int, int], str] = field(default_factory=dict)
    trailer: list[Line] = field(default_factory=list)


def _tree(node: Node, role: str, notes: _Notes) -> _El:
    """`node` with roles and comments; a comment goes to the first member at its position (an
    alias repeats its anchor's positions: the anchor keeps the comments, the copy has none)."""
    el = _El(node, role)
    if node.kind == "map":
        head = _head(node) if role == "step" else None
        for entry in node.entries:
            at = ("entry", entry.key_pos.line, entry.key_pos.column)
            el.members.append(_Member(
                entry.key, _tree(entry.value, _child_role(role, entry.key, entry.value, head),
                                 notes),
                notes.leading.pop(at, []), notes.trailing.pop(at, None)))
    elif node.kind == "list":
        for item in node.items:
            at = ("item", item.pos.line, item.pos.column)
            el.members.append(_Member(None, _tree(item, _child_role(role, None, item, None),
                                                  notes),
                                      notes.leading.pop(at, []), notes.trailing.pop(at, None)))
    return el


def _head(step: Node) -> str | None:
    """The step's head as the reader finds it (`parallel` beside `loop` is the loop's option)."""
    heads = [e.key for e in step.entries if e.key in STEP_KEYS]
    return "loop" if "loop" in heads else (heads[0] if heads else None)


def _child_role(role: str, key: str | None, value: Node, head: str | None) -> str:
    if key is not None and key.startswith("x-"):
        return "data"
    if role == "doc":
        return {"steps": "block", "authority": "grants", "inputs": "inputs"}.get(key or "", "data")
    if role == "grants":
        return "grant"
    if role == "block":
        return "step"
    if role == "step":
        if key is not None and key == head:
            return {"try": "block", "parallel": "branches", "race": "branches"}.get(key, "data")
        if key in _BLOCK_FIELDS:
            return "block"
        return {"arms": "arms", "delegate": "delegate"}.get(key or "", "data")
    if role == "arms":
        return "arm" if value.kind == "map" else "block"
    if role == "arm":
        return "block" if key == "do" else "data"
    if role == "branches":
        return "block"
    return "data"  # grant, inputs, delegate and data hold data


# --- YAML comments -------------------------------------------------------------------------------


def _comments(text: str) -> list[tuple[int, int, Line, bool]]:
    """Every comment and blank line outside scalars: (line, column, text or None, whole line).

    PyYAML's scanner drops comments, so they are found between its tokens: a `#` at the start
    of a line or after a blank, outside every token (a block scalar's header line is outside
    its token past the indicators).
    """
    assert yaml is not None  # a YAML file was just read
    inside = bytearray(len(text) + 1)
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        start, end = token.start_mark.index, token.end_mark.index
        if isinstance(token, yaml.ScalarToken) and token.style in ("|", ">"):
            header = start
            while header < end and text[header] in "|>+-0123456789":
                header += 1
            inside[start:header] = b"\1" * (header - start)
            start = text.find("\n", header, end) + 1 or end
        if end > start:
            inside[start:end] = b"\1" * (end - start)
    found: list[tuple[int, int, Line, bool]] = []
    offset = 0
    for number, line in enumerate(_LINE.findall(text), start=1):
        body = _LINE_END.sub("", line)
        if not line:
            break
        if not body.strip():
            if not inside[offset]:
                found.append((number, 1, None, True))
        else:
            for i, char in enumerate(body):
                if char == "#" and not inside[offset + i] and (i == 0 or body[i - 1] in " \t"):
                    found.append((number, i + 1, body[i:].rstrip(), not body[:i].strip()))
                    break
        offset += len(line)
    return found


def _members(node: Node) -> Iterator[tuple[tuple[str, int, int], int, int]]:
    """Every member of the document in source order, outer before inner: its key and start."""
    if node.kind == "map":
        for entry in node.entries:
            yield ("entry", entry.key_pos.line, entry.key_pos.column), *_start(entry.key_pos)
            yield from _members(entry.value)
    elif node.kind == "list":
        for item in node.items:
            yield ("item", item.pos.line, item.pos.column), *_start(item.pos)
            yield from _members(item)


def _start(pos: Pos) -> tuple[int, int]:
    return pos.line, pos.column


def _attach(comments: list[tuple[int, int, Line, bool]], root: Node) -> _Notes:
    """A whole-line comment (or blank line) goes before the next member to start; a comment
    after content goes on the line of the outermost member starting on that line, or, when
    none starts there, before the next member."""
    members = list(_members(root))
    notes = _Notes()

    def before_next(line: int, text: Line) -> None:
        following = next((m for m in members if m[1] > line), None)
        if following is None:
            notes.trailer.append(text)
        else:
            notes.leading.setdefault(following[0], []).append(text)

    for line, _column, text, whole in comments:
        if whole:
            before_next(line, text)
            continue
        on_line = next((m for m in members if m[1] == line), None)
        if on_line is None or on_line[0] in notes.trailing:
            before_next(line, text)
        else:
            assert text is not None
            notes.trailing[on_line[0]] = text
    return notes


def _blank_runs(lines: list[Line], *, at_start: bool) -> list[Line]:
    """Blank lines collapse to one; none opens the file."""
    result: list[Line] = []
    for line in lines:
        if line is None and ((not result and at_start) or (result and result[-1] is None)):
            continue
        result.append(line)
    return result


# --- writing YAML --------------------------------------------------------------------------------


class _Yaml:
    def __init__(self) -> None:
        self.first = True

    def document(self, tree: _El, trailer: list[Line]) -> str:
        lines = self.mapping(tree, 0)
        tail = _blank_runs(trailer, at_start=not lines)
        while tail and tail[-1] is None:
            tail.pop()
        lines.extend("" if line is None else line for line in tail)
        return "\n".join(lines) + "\n"

    def leading(self, member: _Member, indent: int) -> list[str]:
        lines = _blank_runs(member.leading, at_start=self.first)
        self.first = False
        return ["" if line is None else " " * indent + line for line in lines]

    @staticmethod
    def comment(line: str, member: _Member) -> str:
        return line if member.trailing is None else f"{line}  {member.trailing}"

    def flow(self, el: _El, used: int) -> str | None:
        """The one-line form of `el`, if it is written so at column `used`."""
        if el.node.kind == "scalar":
            return _yaml_scalar(el.node.scalar)
        if not el.members:
            return "{}" if el.node.kind == "map" else "[]"
        if el.structure or el.commented():
            return None
        text = _yaml_flow(el.node)
        return text if used + len(text) <= WIDTH else None

    def mapping(self, el: _El, indent: int) -> list[str]:
        lines: list[str] = []
        for member in el.members:
            lines.extend(self.leading(member, indent))
            assert member.key is not None
            key = " " * indent + _yaml_key(member.key) + ":"
            inline = self.flow(member.value, len(key) + 1)
            if inline is not None:
                lines.append(self.comment(f"{key} {inline}", member))
                continue
            lines.append(self.comment(key, member))
            lines.extend(self.collection(member.value, indent + INDENT))
        return lines

    def collection(self, el: _El, indent: int) -> list[str]:
        return self.mapping(el, indent) if el.node.kind == "map" else self.sequence(el, indent)

    def sequence(self, el: _El, indent: int) -> list[str]:
        lines: list[str] = []
        for member in el.members:
            _hoist(member)
            lines.extend(self.leading(member, indent))
            dash = " " * indent + "- "
            inline = self.flow(member.value, len(dash))
            if inline is not None:
                lines.append(self.comment(dash + inline, member))
                continue
            nested = self.collection(member.value, indent + INDENT)
            nested[0] = self.comment(dash + nested[0][indent + INDENT:], member)
            lines.extend(nested)
        return lines


def _hoist(item: _Member) -> None:
    """Comments of the members that start on a sequence item's dash line (its first member, and
    that one's first member while they are items: `- - x`, `- k: v`) belong to the item, as
    they would when the written file is read again."""
    el = item.value
    while el.members:
        first = el.members[0]
        item.leading, first.leading = item.leading + first.leading, []
        if first.trailing is not None:
            if item.trailing is None:
                item.trailing = first.trailing
            else:
                item.leading.append(first.trailing)
            first.trailing = None
        if el.node.kind != "list":
            break
        el = first.value


def _yaml_scalar(value: object) -> str:
    """A scalar as PyYAML writes it in flow context when that is plain (it reads back the
    same), else double-quoted."""
    assert yaml is not None

    def dump(style: str | None) -> str:
        text: str = yaml.safe_dump([value], default_flow_style=True, default_style=style,
                                   width=_NO_WRAP, allow_unicode=True)
        return text.strip()[1:-1]  # `[value]`

    plain = dump(None)
    return plain if not plain.startswith(("'", '"')) else dump('"')


def _yaml_key(key: str) -> str:
    return _yaml_scalar(key)


def _yaml_flow(node: Node) -> str:
    if node.kind == "map":
        return "{" + ", ".join(f"{_yaml_key(e.key)}: {_yaml_flow(e.value)}"
                               for e in node.entries) + "}"
    if node.kind == "list":
        return "[" + ", ".join(_yaml_flow(item) for item in node.items) + "]"
    return _yaml_scalar(node.scalar)


# --- writing JSON --------------------------------------------------------------------------------


class _Json:
    def document(self, tree: _El) -> str:
        return "\n".join(self.value(tree, 0, 0)) + "\n"

    def value(self, el: _El, indent: int, used: int) -> list[str]:
        """`el` written from column `used` at indentation `indent`: its lines, the first one
        without its indentation (it follows a key or starts the file)."""
        if el.node.kind == "scalar" or not el.members:
            return [_json_flow(el.node)]
        if not el.structure:
            text = _json_flow(el.node)
            if used + len(text) + 1 <= WIDTH:  # the comma after it
                return [text]
        opening, closing = ("{", "}") if el.node.kind == "map" else ("[", "]")
        lines = [opening]
        pad = " " * (indent + INDENT)
        for i, member in enumerate(el.members):
            prefix = pad + ("" if member.key is None else _json_string(member.key) + ": ")
            nested = self.value(member.value, indent + INDENT, len(prefix))
            nested[0] = prefix + nested[0]
            if i < len(el.members) - 1:
                nested[-1] += ","
            lines.extend(nested)
        lines.append(" " * indent + closing)
        return lines


def _json_string(value: str) -> str:
    """Non-ASCII characters as themselves, but a lone surrogate (which UTF-8 cannot hold) as
    the escape it was read from."""
    return json.dumps(value, ensure_ascii=not value.isascii() and not _utf8(value))


def _utf8(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_flow(node: Node) -> str:
    if node.kind == "map":
        return "{" + ", ".join(f"{_json_string(e.key)}: {_json_flow(e.value)}"
                               for e in node.entries) + "}"
    if node.kind == "list":
        return "[" + ", ".join(_json_flow(item) for item in node.items) + "]"
    value = node.scalar
    if isinstance(value, float) and value - value != 0:  # an infinity or NaN
        raise FormatError(f"{value} cannot be written as JSON")
    return _json_string(value) if isinstance(value, str) else json.dumps(value)


# --- the output reads back as the input ----------------------------------------------------------


def _verify(before: str, after: str, filename: str, is_json: bool) -> None:
    old, new = load_located(before, filename), load_located(after, filename)
    if _typed(old.plain()) != _typed(new.plain()):
        raise FormatError(f"{filename}: the formatted text would hold other data")
    if not is_json:
        def texts(text: str) -> list[str]:
            return sorted(c[2] for c in _comments(text) if c[2] is not None)
        if texts(before) != texts(after):
            raise FormatError(f"{filename}: the formatted text would lose or add a comment")


def _typed(value: object) -> object:
    """`value` with the type of every scalar: 1, 1.0 and true compare equal in Python."""
    if isinstance(value, dict):
        return tuple((key, _typed(item)) for key, item in value.items())
    if isinstance(value, list):
        return ("list", tuple(_typed(item) for item in value))
    if isinstance(value, float) and value != value:  # NaN
        return ("float", "nan")
    return (type(value).__name__, value)

