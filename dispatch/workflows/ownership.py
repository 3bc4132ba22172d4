"""The runtime's own check that concurrent branches own disjoint values (docs/design.md#budgets;
docs/workflows.md#concurrent-steps).

The checker proves it (AGL-E012); the runtime checks again, on the values themselves, before
any branch starts: a handle, proposal, decision or permit of the enclosing run that two
branches (or the iterations of a parallel loop, which all run one body) name is refused
`parallel_capture` before anything is proposed or claimed. Only trusted values are owned: JSON
data may be read by every branch.

The one exception is the shareable read grant: a handle every lane naming it passes only
as a `reads` argument of a contract declaring `shareable` (a pure read) may be named by all of
them. The contract is the runtime's registered one, looked up now: a grant withdrawn since the
workflow was checked is refused here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

from dispatch.runtime import get_runtime
from dispatch.workflows.values import DecisionValue, Env, HandleValue, PermitValue, ProposalValue
from protocols.denials import Denial, DenialCode
from protocols.workflow.ir import Block, If, Let, Loop, Match, Parallel, Propose, Race, Ref, Try

_BLOCKS = frozenset({"then", "orelse", "body", "catch", "arms", "branches"})


def owned(value: Any) -> str | None:
    """The identity a branch owns when it names `value`, or None for data."""
    if isinstance(value, HandleValue):
        return f"resource {value.id}"
    if isinstance(value, ProposalValue):
        return f"proposal {value.id}"
    if isinstance(value, DecisionValue):
        return f"the decision on proposal {value.proposal_id}"
    if isinstance(value, PermitValue):
        return f"permit {value.permit_id or value.proposal_id}"
    return None


def free_names(block: Block, bound: frozenset[str] = frozenset()) -> dict[str, bool]:
    """The names `block` reads before binding them itself (what it takes from outside), each
    with whether every such use is a shared read (`_shared_uses`)."""
    free: dict[str, bool] = {}
    for step in block:
        shared = _shared_uses(step)
        for ref in _refs(step):
            if ref.name not in bound:
                free[ref.name] = free.get(ref.name, True) and id(ref) in shared
        for inner, extra in _inner_blocks(step):
            for name, only_shared in free_names(inner, bound | extra).items():
                free[name] = free.get(name, True) and only_shared
        bound = bound | _binds(step)
    return free


def _shared_uses(step: object) -> set[int]:
    """The references of a `propose` passed whole as a `reads` argument of a contract that
    grants shared reads (`OperationContract.shareable`); none for any other step."""
    if not isinstance(step, Propose):
        return set()
    try:
        contract = get_runtime().registry.resolve(step.operation)
    except Denial:
        return set()  # an unknown operation is refused at its own step; it shares nothing
    if not contract.shareable:
        return set()
    return {id(expr) for arg, expr in step.args
            if arg in contract.reads and isinstance(expr, Ref) and not expr.fields}


def refuse_shared(env: Env, lanes: Iterable[tuple[str, Block]], *, each_iteration: bool,
                  construct: str) -> None:
    """Raise `Denial(parallel_capture)` when two lanes name one owned value of `env`.
    `each_iteration`: the lanes are a parallel loop's iterations (one body, so any owned
    outer value it names is named by all of them)."""
    owners: dict[str, str] = {}
    shared_by: dict[str, bool] = {}  # identity -> every lane so far names it as a shared read
    lanes = list(lanes)
    for label, body in lanes:
        for name, only_shared in sorted(free_names(body).items()):
            identity = owned(env.get(name))
            if identity is None:
                continue
            shared = only_shared and isinstance(env.get(name), HandleValue)
            if shared and shared_by.get(identity, True):
                shared_by[identity] = True
                owners.setdefault(identity, label)
                continue
            if each_iteration and len(lanes) > 1:
                raise Denial(DenialCode.PARALLEL_CAPTURE,
                             f"every iteration of the parallel loop names `{name}` ({identity}):"
                             " each iteration must create or obtain its own", name=name)
            if identity in owners and owners[identity] != label:  # exclusive here or there
                raise Denial(DenialCode.PARALLEL_CAPTURE,
                             f"{construct} branches `{owners[identity]}` and `{label}` both name "
                             f"{identity} (`{name}`): each branch owns its own handles, "
                             "proposals, decisions and permits", name=name,
                             branches=[owners[identity], label])
            owners[identity] = label
            shared_by[identity] = False


def _binds(step: object) -> frozenset[str]:
    names = {getattr(step, "bind", None)}
    if isinstance(step, Let):
        names.add(step.bind)
    return frozenset(n for n in names if isinstance(n, str))


def _inner_blocks(step: object) -> Iterator[tuple[Block, frozenset[str]]]:
    if isinstance(step, If):
        yield step.then, frozenset()
        yield step.orelse, frozenset()
    elif isinstance(step, Match):
        for arm in step.arms:
            yield arm.body, frozenset(name for _, name in arm.bindings)
    elif isinstance(step, Loop):
        yield step.body, frozenset({step.item or "item"} if step.over is not None else ())
    elif isinstance(step, Try):
        yield step.body, frozenset()
        yield step.catch or (), frozenset()
    elif isinstance(step, Parallel | Race):
        for branch in step.branches:
            yield branch.body, frozenset()


def _refs(node: object) -> Iterator[Ref]:
    """The references in a step's own fields (not in its nested blocks)."""
    if isinstance(node, Ref):
        yield node
    elif isinstance(node, tuple | list):
        for item in node:
            yield from _refs(item)
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        for f in dataclasses.fields(node):
            if f.name not in _BLOCKS and f.name != "span":
                yield from _refs(getattr(node, f.name))

