"""The workflow's IR as the runtime reads it: every step in order, and the digest of its shape
(the IR without source positions: what a resumed run must match, besides contracts and inputs).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from typing import Any

from protocols.canonical import digest_bytes
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
    """A digest of the workflow's IR without source positions: what a resumed run must match."""
    text = json.dumps(_shape(workflow), sort_keys=True, separators=(",", ":"), default=str)
    return digest_bytes(text.encode())


def _shape(node: Any) -> Any:
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return {"_": type(node).__name__, **{f.name: _shape(getattr(node, f.name))
                                             for f in dataclasses.fields(node)
                                             if f.name != "span"}}
    if isinstance(node, list | tuple):
        return [_shape(item) for item in node]
    if isinstance(node, frozenset | set):
        return sorted((_shape(item) for item in node), key=lambda v: json.dumps(v, default=str))
    if isinstance(node, Mapping):
        return {str(key): _shape(value) for key, value in node.items()}
    return node
