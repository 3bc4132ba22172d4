"""What a workflow run holds and answers: its outcomes, its runtime values and their evaluation.

Data is plain JSON. Only the trusted steps mint handles, proposals, decisions, permits and
dispatch outcomes (`steps.py`); no JSON value is ever one of them, whatever its shape
(docs/design.md#resources, #permits), and evaluating a value that must be one refuses anything else.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject, JSONValue
from protocols.workflow.ir import Expr
from protocols.workflow.ir import Literal as Lit

RunState = Literal["waiting", "finished", "denied", "timed_out", "cancelled"]
Mode = Literal["inline", "worker"]
Env: TypeAlias = dict[str, Any]
"""A run's environment: each bound name to its value (JSON data or a trusted step's value)."""


# --- the public API -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StepOutcome:
    """What one step did, as recorded for this run.

    `status` by step: create/edit `created`/`edited`; propose `proposed`; request_approval
    `pending`, `granted` or `rejected` (denied by the approver, expired or revoked: the workflow's
    `Denied` arm runs); dispatch `completed`, `failed_no_effect`, `unknown` (the outcome
    vocabulary, `protocols.lifecycle.Outcome`) or `running` (claimed, not settled yet); if
    `then`/`else`; match the arm taken; try `caught`. Any step the runtime refused: `denied`,
    with the dispatcher's denial `code` (`authority_revoked`, `stale_revision`, ...) and message.
    """

    path: str
    step: str
    status: str
    code: str | None = None
    message: str = ""
    detail: JSONObject = field(default_factory=dict)


@dataclass(frozen=True)
class WorkflowRun:
    """The state of one run: `waiting` (resume with the same execution id), `finished`,
    `denied` (a refusal ended it; `denial` says which), `timed_out` (its deadline passed) or
    `cancelled` (docs/workflows.md#deadlines)."""

    execution_id: str
    workflow: str
    state: RunState
    outcomes: tuple[StepOutcome, ...]
    waiting_on: str | None = None
    denial: StepOutcome | None = None


class WorkflowRefused(Exception):
    """The runtime refused to start (or resume) the run: nothing ran, nothing was recorded.

    `code`, a `DenialCode` of the catalogue (`protocols.denials`): `contract_mismatch` (the
    registered contracts moved since checking), `effect_not_permitted`, `unsupported_step`,
    `malformed_request` (a value of the workflow that `canon/1` cannot encode),
    `input_invalid`, `not_found` (no such execution of this principal) or `execution_mismatch`
    (the execution ran another workflow, contracts or inputs).
    """

    def __init__(self, code: DenialCode, message: str, *, path: str | None = None) -> None:
        self.code = DenialCode(code)  # a catalogue code, or ValueError
        self.message = message
        self.path = path
        super().__init__(f"{code}: {message}")


# --- runtime values -----------------------------------------------------------------------------


@dataclass(frozen=True)
class HandleValue:
    id: str
    revision: int
    kind: str


@dataclass(frozen=True)
class ProposalValue:
    id: str
    operation: str


@dataclass(frozen=True)
class DecisionValue:
    proposal_id: str
    tag: Literal["granted", "denied"]
    reason: str = ""


@dataclass(frozen=True)
class PermitValue:
    proposal_id: str
    permit_id: str


@dataclass(frozen=True)
class OutcomeValue:
    tag: str
    result: JSONValue = None
    error: str = ""


TRUSTED = (HandleValue, ProposalValue, DecisionValue, PermitValue, OutcomeValue)


class Wait(Exception):
    """The step at `path` waits for a human or a worker: the run returns `waiting`. A `kind`
    (`approval`, `receive`, `approve`) parks the step in the store, so that the decision or the
    input resumes the run (`dispatch.workflows.waits`); without one its caller runs it again."""

    def __init__(self, path: str, *, kind: str | None = None,
                 approval_id: str | None = None, focus: list[list[str]] | None = None) -> None:
        self.path = path
        self.kind = kind
        self.approval_id = approval_id
        #: The lanes to enter to reach the step again (a `slot` wait of a lane, which its
        #: wake-up runs alone instead of the whole run).
        self.focus = focus


class Denied(Exception):
    """A step was refused: the run ends `denied`, unless a `try` catches it."""

    def __init__(self, outcome: StepOutcome) -> None:
        self.outcome = outcome


# --- evaluation ---------------------------------------------------------------------------------


def value(env: Env, expr: Expr) -> Any:
    """A literal (a copy), or the binding `expr` names with its JSON fields read."""
    if isinstance(expr, Lit):
        return copy.deepcopy(expr.value)
    if expr.name not in env:
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": f"/{expr.name}", "message": f"`{expr}` is not bound on this path"}])
    found = env[expr.name]
    for name in expr.fields:
        if isinstance(found, dict) and name in found:
            found = found[name]
        elif isinstance(found, list) and name.isdigit() and int(name) < len(found):
            found = found[int(name)]
        else:
            raise Denial(DenialCode.SCHEMA_INVALID, errors=[
                {"pointer": "/" + "/".join((expr.name, *expr.fields)),
                 "message": f"`{expr}`: no field `{name}` in the data"}])
    return found


def data(env: Env, expr: Expr) -> JSONValue:
    """JSON data only: never a trusted value."""
    found = value(env, expr)
    if isinstance(found, TRUSTED):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": f"/{expr}", "message": "JSON data is required here"}])
    return copy.deepcopy(found)


def trusted(env: Env, expr: Expr, kind: type) -> Any:
    """A trusted value of `kind`: only trusted steps mint them, data never stands in."""
    found = value(env, expr)
    if not isinstance(found, kind):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": f"/{expr}", "message": f"`{expr}` is not a {kind.__name__[:-5]}"}])
    return found


def argument(env: Env, expr: Expr) -> JSONValue:
    """A proposal argument: data, or a handle as the `{"id", "revision"}` the store resolves."""
    found = value(env, expr)
    if isinstance(found, HandleValue):
        return {"id": found.id, "revision": found.revision}
    if isinstance(found, TRUSTED):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": f"/{expr}", "message": "an argument is data or a resource handle"}])
    return copy.deepcopy(found)
