"""The workflow formatter (docs/workflows.md#canonical-layout): every corpus file reads back as
the same IR once formatted, formatting twice changes nothing, comments survive, and the same
holds for generated workflows in any layout PyYAML or json can write."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols.workflow import Diagnostics, Workflow, parse_workflow
from protocols.workflow.format import WIDTH, format_workflow, is_formatted

CORPUS = sorted((Path(__file__).resolve().parents[2] / "workflows").glob("*/*.*"))
READABLE = [p for p in CORPUS
            if isinstance(parse_workflow(p.read_text(encoding="utf-8"), filename=p.name),
                          Workflow)]
COMMENT = re.compile(r"(?:^|\s)(#.*)$")


def shape(node: Any) -> Any:
    """The IR without source positions (what `dispatch.workflows.shape` digests)."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return (type(node).__name__, tuple((f.name, shape(getattr(node, f.name)))
                                           for f in dataclasses.fields(node) if f.name != "span"))
    if isinstance(node, list | tuple):
        return tuple(shape(item) for item in node)
    if isinstance(node, frozenset | set):
        return ("set", tuple(sorted(repr(shape(item)) for item in node)))
    if isinstance(node, dict):
        return ("dict", tuple((k, shape(v)) for k, v in node.items()))
    return (type(node).__name__, node)


def ir(text: str, filename: str) -> Any:
    parsed = parse_workflow(text, filename=filename)
    assert isinstance(parsed, Workflow), parsed
    return shape(parsed)


def formatted(text: str, filename: str) -> str:
    result = format_workflow(text, filename=filename)
    assert isinstance(result, str), result
    return result


def comments(text: str) -> list[str]:
    return [m.group(1).rstrip() for line in text.splitlines() if (m := COMMENT.search(line))]


def test_the_corpus_is_mostly_readable() -> None:
    assert len(READABLE) >= 100
    assert len(CORPUS) - len(READABLE) <= 10  # the AGL-E017 fixtures the reader refuses


@pytest.mark.parametrize("path", READABLE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_file_round_trips_and_formatting_twice_changes_nothing(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    once = formatted(text, path.name)
    assert ir(once, path.name) == ir(text, path.name)
    assert formatted(once, path.name) == once
    assert is_formatted(once, filename=path.name) is True
    if path.suffix == ".yaml":
        assert comments(once) == comments(text)  # every `# expect:`, `# valid:` and note
        assert all(len(line) <= WIDTH for line in once.splitlines() if "#" not in line)


@pytest.mark.parametrize("path", sorted(set(CORPUS) - set(READABLE)), ids=lambda p: p.name)
def test_a_file_the_reader_refuses_is_not_formatted(path: Path) -> None:
    result = format_workflow(path.read_text(encoding="utf-8"), filename=path.name)
    assert isinstance(result, Diagnostics)
    assert result.codes == ("AGL-E017",)


MESSY = """\
# expect: ok
# a header


version: 1   # the version
name: "x"
steps:   # the steps
  # before the first step

  - propose: email.send  # on the step's line
    args: {a: 1,   # inside a flow mapping
           b: [1, 2]}
    bind: p
  -
    # between the dash and the step
    agent: a
    input: {long: "LONG", b: {c: [1, 2, "x\\ny", 'it''s']}}
    bind: out
  - match: $out
    arms:
      _: [
      ]   # nothing
# the end

""".replace("LONG", "a" * 80)  # a data line too long to flow

CANONICAL = """\
# expect: ok
# a header

version: 1  # the version
name: x
steps:  # the steps
  # before the first step

  - propose: email.send  # on the step's line
    args: {a: 1, b: [1, 2]}  # inside a flow mapping
    bind: p
  # between the dash and the step
  - agent: a
    input:
      long: LONG
      b: {c: [1, 2, "x\\ny", it's]}
    bind: out
  - match: $out
    arms:
      _: []
# nothing
# the end
""".replace("LONG", "a" * 80)


def test_the_canonical_layout_keeps_comments_where_docs_say() -> None:
    """docs/workflows.md#canonical-layout, rule by rule: structure one member per line, data in
    flow style within the width, comments before the member they precede or on its line, one
    blank line kept, double quotes only where plain would read otherwise."""
    assert formatted(MESSY, "messy.yaml") == CANONICAL
    assert ir(CANONICAL, "messy.yaml") == ir(MESSY, "messy.yaml")
    assert is_formatted(MESSY, filename="messy.yaml") is False


def test_a_comment_inside_data_writes_it_one_member_per_line() -> None:
    text = ("version: 1\nname: n\nsteps:\n  - create: report\n    payload:\n"
            "      title: t  # kept\n      body: b\n")
    assert formatted(text, "c.yaml") == text


def test_json_keeps_x_keys_and_writes_structure_one_member_per_line() -> None:
    text = ('{"x-expect": "ok", "version": 1, "name": "j", "steps": '
            '[{"agent": "a", "input": {"q": "$$literal"}, "bind": "out"}]}')
    assert formatted(text, "j.json") == (
        '{\n  "x-expect": "ok",\n  "version": 1,\n  "name": "j",\n  "steps": [\n    {\n'
        '      "agent": "a",\n      "input": {"q": "$$literal"},\n      "bind": "out"\n'
        '    }\n  ]\n}\n')


# --- generated workflows ---------------------------------------------------------------------

TRICKY = st.text(st.sampled_from("ab :#-?,[]{}'\"\\\n\té*&!%@`|>"), max_size=12).filter(
    lambda s: not s.startswith("$"))
NAME = st.sampled_from(["p", "d", "permit", "out", "x_1"])
REF = st.sampled_from(["$p", "$d", "$out.field", "$x_1.a-b"])
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                    st.floats(allow_nan=False, allow_infinity=False), TRICKY,
                    st.sampled_from(["10.00", "yes", "null", "1e3", "$$x", "~", "-"]))
literals = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(TRICKY.filter(bool), inner, max_size=3)),
    max_leaves=8)
values = st.one_of(REF, literals)
maybe_bind = st.one_of(st.just({}), NAME.map(lambda n: {"bind": n}))


def _with(base: dict[str, Any], *extras: dict[str, Any]) -> dict[str, Any]:
    for extra in extras:
        base.update(extra)
    return base


leaf_steps = st.one_of(
    st.builds(lambda op, a, b: _with({"propose": op, "args": a}, b),
              st.sampled_from(["email.send", "crm.lookup"]),
              st.dictionaries(st.sampled_from(["draft", "customer_id"]), values, max_size=2),
              maybe_bind),
    st.builds(lambda v, b: _with({"request_approval": v, "role": "operator"}, b), REF,
              maybe_bind),
    st.builds(lambda s, b: _with({"approve": s}, b), TRICKY, maybe_bind),
    st.builds(lambda v, r, b: _with({"dispatch": v, "permit": "$permit"},
                                    {"retry": r} if r else {}, b),
              REF, st.sampled_from([0, 2]), maybe_bind),
    st.builds(lambda p, b: _with({"create": "report", "payload": p}, b), values, maybe_bind),
    st.builds(lambda n, v: {"let": n, "value": v}, NAME, values),
    st.builds(lambda b: _with({"receive": "host"}, b), maybe_bind),
    st.builds(lambda i, d, b: _with({"agent": "a", "tools": ["crm.lookup"], "input": i}, d, b),
              st.dictionaries(st.sampled_from(["q", "h"]), values, max_size=2),
              st.sampled_from([{}, {"delegate": {"operations": ["crm.lookup"],
                                                 "scope": {"customer": ["c-1"]},
                                                 "expires_in": 60, "budget": 2}}]),
              maybe_bind),
    st.builds(lambda note: {"receive": "host", "x-note": note}, literals),
)


def _nested(blocks: st.SearchStrategy[list[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    arm = st.one_of(blocks, st.builds(lambda b, d: {"bind": b, "do": d},
                                      st.dictionaries(st.sampled_from(["permit", "reason"]),
                                                      NAME, max_size=1), blocks))
    return st.one_of(
        st.builds(lambda c, t, e: {"if": c, "then": t, "else": e}, REF, blocks, blocks),
        st.builds(lambda v, a: {"match": v, "arms": a}, REF,
                  st.dictionaries(st.sampled_from(["Granted", "Denied", "_", "a b"]), arm,
                                  min_size=1, max_size=3)),
        st.builds(lambda n, par, d: {"loop": n, "parallel": par, "do": d},
                  st.one_of(st.integers(0, 3), REF), st.booleans(), blocks),
        st.builds(lambda b, c: {"try": b, "catch": c}, blocks, blocks),
        st.builds(lambda a, b: {"parallel": {"left": a, "right": b}}, blocks, blocks),
        st.builds(lambda a, b: {"race": {"fast": a, "slow": b}}, blocks, blocks),
    )


steps = st.recursive(leaf_steps, lambda inner: _nested(st.one_of(
    st.lists(inner, max_size=3), st.none())), max_leaves=12)
documents = st.builds(
    lambda name, effects, steps, note: {
        "version": 1, "name": name, "effects": effects,
        "authority": [{"operations": ["email.send"], "scope": {"mailbox": "*"}}],
        "inputs": {"draft": {"handle": "email_draft"}, "flag": "bool"}, "steps": steps,
        **({"x-note": note} if note is not None else {})},
    TRICKY.filter(bool), st.lists(st.sampled_from(["human", "read"]), max_size=2),
    st.lists(steps, max_size=5), st.one_of(st.none(), literals))


def _render(document: dict[str, Any], data: st.DataObject) -> tuple[str, str, list[str]]:
    """`document` as a file in one of the layouts PyYAML and json write, with comments."""
    if data.draw(st.booleans(), label="json"):
        indent = data.draw(st.sampled_from([None, 1, 2, 4]), label="indent")
        return "w.json", json.dumps(document, indent=indent, ensure_ascii=False), []
    flow = data.draw(st.sampled_from([False, None, True]), label="flow style")
    width = data.draw(st.sampled_from([40, 80, 10_000]), label="width")
    text = yaml.safe_dump(document, default_flow_style=flow, width=width, sort_keys=False,
                          allow_unicode=data.draw(st.booleans(), label="unicode"))
    lines = text.splitlines()
    notes: list[str] = []
    for i in sorted(data.draw(st.sets(st.integers(0, len(lines) - 1), max_size=4),
                              label="comment lines"), reverse=True):
        note = f"# note {i}: it's {{here}}"
        if data.draw(st.booleans(), label="whole line"):
            indent = len(lines[i]) - len(lines[i].lstrip(" -"))
            lines.insert(i, " " * indent + note)
        else:
            lines[i] += "  " + note
        notes.append(note)
    commented = "\n".join(lines) + "\n"
    try:
        same = yaml.safe_load(commented) == yaml.safe_load(text)
    except yaml.YAMLError:  # a comment that ends a line inside a flow collection or a scalar
        same = False
    if not same:
        return "w.yaml", text, []
    return "w.yaml", commented, notes


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(documents, st.data())
def test_generated_workflows_round_trip_and_format_once(document: dict[str, Any],
                                                        data: st.DataObject) -> None:
    filename, text, notes = _render(document, data)
    once = formatted(text, filename)
    assert ir(once, filename) == ir(text, filename)
    assert formatted(once, filename) == once
    for note in notes:
        assert once.count(note) == 1


@pytest.mark.parametrize(("text", "expected"), [
    ("version: 1\nname: n\nsteps:\n  - if: true\n    then:\n    else: null\n",
     "version: 1\nname: n\nsteps:\n  - if: true\n    then: null\n    else: null\n"),
    ("version: 1\nname: n\nsteps:\n  - create: report\n    payload: |  # on the header\n"
     "      line # not a comment\n      two\n",
     'version: 1\nname: n\nsteps:\n  - create: report\n'
     '    payload: "line # not a comment\\ntwo\\n"  # on the header\n'),
    ("---\nversion: 1\nname: &a n\nx-copy: *a\nsteps: []\n...\n",
     "version: 1\nname: n\nx-copy: n\nsteps: []\n"),
    ("version: 1\r\nname: n   # crlf\r\nsteps: []\r\n", "version: 1\nname: n  # crlf\nsteps: []\n"),
], ids=["null-block", "block-scalar", "alias-and-markers", "crlf"])
def test_edge_layouts(text: str, expected: str) -> None:
    """An empty block stays null, a block scalar becomes a double-quoted one keeping its header's
    comment, aliases are expanded and document markers dropped, lines end with LF."""
    assert formatted(text, "e.yaml") == expected
    assert ir(expected, "e.yaml") == ir(text, "e.yaml")


def test_an_alias_does_not_copy_its_anchors_comments() -> None:
    text = "version: 1\nname: n\nx-a: &a\n  b: 1  # once\nx-b: *a\nsteps: []\n"
    assert formatted(text, "a.yaml") == (
        "version: 1\nname: n\nx-a:\n  b: 1  # once\nx-b: {b: 1}\nsteps: []\n")


def test_a_comment_on_a_dash_line_belongs_to_the_item() -> None:
    """In `- - 1` both items start on one line; read again, a comment there is the outer
    item's, so the formatter gives it to the outer item at once (else a second pass moves it)."""
    text = "version: 1\nname: n\nx-a: [[\n    1,  # c\n    2], 3]\nsteps: []\n"
    once = formatted(text, "d.yaml")
    assert once == "version: 1\nname: n\nx-a:\n  - [1, 2]  # c\n  - 3\nsteps: []\n"
    assert formatted(once, "d.yaml") == once


def test_json_keeps_non_ascii_and_escapes_what_utf8_cannot_hold() -> None:
    """A string is written with its non-ASCII characters as themselves, unless it holds a lone
    surrogate: then all of it with escapes."""
    assert '"name": "café"' in formatted('{"version": 1, "name": "caf\\u00e9", "steps": []}',
                                         "s.json")
    text = '{"version": 1, "name": "caf\\u00e9 \\ud800", "steps": []}'
    once = formatted(text, "s.json")
    assert '"name": "caf\\u00e9 \\ud800"' in once
    once.encode("utf-8")  # writable as the command writes files
    assert ir(once, "s.json") == ir(text, "s.json")
