"""The workflow's IR as the runtime reads it: every step in order, and the digest of its shape.

The shape digest is what a resumed run must match (besides contracts and inputs): the IR
without source positions, as `canon/1` (`protocols.canonical`). Every value is turned into JSON
explicitly (a node into an object tagged with its type under `_`, a set into a list sorted by
the canonical bytes of its items, an enum into its value); anything `canon/1` cannot encode (NaN,
a non-string key, a key starting with `$`, an object of another type) is refused with a
`CanonicalizationError`, never written by `str()`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from enum import Enum

from protocols.canonical import canonicalize, digest
from protocols.jsontypes import JSONValue
from protocols.workflow.ir import Block, If, Loop, Match, Parallel, Race, Step, Try, Workflow


def walk(block: Block) -> Iterator[Step]:
    """Every step of `block` and of the blocks nested in it, in source order."""
    for step in block:
        yield step
        if isinstance(step, If):
            yield from walk(step.then)
            yield from walk(step.orelse)
        elif isinstance(step, Match):
            for arm in step.arms:
                yield from walk(arm.body)
        elif isinstance(step, Loop):
            yield from walk(step.body)
        elif isinstance(step, Try):
            yield from walk(step.body)
            yield from walk(step.catch or ())
        elif isinstance(step, Parallel | Race):
            for branch in step.branches:
                yield from walk(branch.body)


def shape_digest(workflow: Workflow) -> str:
    """`sha256:` of the `canon/1` bytes of the workflow's IR without source positions.

    Raises `CanonicalizationError` for a value `canon/1` refuses (its `pointer` locates it in
    the shape).
    """
    return digest(_shape(workflow))


def _shape(node: JSONValue) -> JSONValue:
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return {"_": type(node).__name__, **{f.name: _shape(getattr(node, f.name))
                                             for f in dataclasses.fields(node)
                                             if f.name != "span"}}
    if isinstance(node, Enum):
        return _shape(node.value)
    if isinstance(node, list | tuple):
        return [_shape(item) for item in node]
    if isinstance(node, frozenset | set):
        return sorted((_shape(item) for item in node), key=canonicalize)
    if isinstance(node, Mapping):
        return {key: _shape(item) for key, item in node.items()}
    return node
