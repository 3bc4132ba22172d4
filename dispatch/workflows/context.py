"""What every step of one run shares: who runs it, its journal, and how a step settles or is
refused (recorded as a typed outcome, journaled so that a re-run replays it)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import NoReturn, TypeVar

from dispatch.agent.adapters import ModelAdapter
from dispatch.models import Principal
from dispatch.workflows.journal import Journal
from dispatch.workflows.values import Denied, Mode, StepOutcome
from protocols.denials import Denial
from protocols.jsontypes import JSONObject, JSONValue
from protocols.workflow.ir import Workflow

T = TypeVar("T")


@dataclass
class RunContext:
    workflow: Workflow
    principal: Principal
    execution_id: str
    journal: Journal
    now: datetime
    mode: Mode
    #: `expires:` of each proposal's `request_approval`, by the proposal's binding.
    expires: dict[str, int] = field(default_factory=dict)
    outcomes: list[StepOutcome] = field(default_factory=list)
    #: The model adapter of each agent step (delegated or not), by agent name.
    agents: Mapping[str, ModelAdapter] = field(default_factory=dict)
    #: A lane worker's run: the (step key, lane) of each concurrent step it runs one lane of,
    #: outermost first, and how many of them it has entered (`dispatch.workflows.parallel`).
    focus: tuple[tuple[str, str], ...] = ()
    entered: int = 0
    #: Started without its source: no worker can rebuild it, so its caller runs the lanes.
    source_less: bool = False

    def record(self, key: str, step: str, status: str, *, code: str | None = None,
               message: str = "", detail: JSONObject | None = None) -> None:
        """An outcome of this run that is not journaled (control flow, a wait)."""
        self.outcomes.append(StepOutcome(key, step, status, code, message, detail or {}))

    def settle(self, key: str, outcome: StepOutcome) -> JSONObject:
        """Journal a settled step; a re-run replays it without calling anything."""
        stored = self.journal.put(key, {"outcome": asdict(outcome)}, self.now)
        return self._replayed(stored)

    def replay(self, key: str) -> JSONObject | None:
        """The journaled step's detail (with `_status`), or None if it has not settled."""
        stored = self.journal.results.get(key)
        return None if stored is None else self._replayed(stored)

    def _replayed(self, stored: JSONObject) -> JSONObject:
        outcome = StepOutcome(**stored["outcome"])
        self.outcomes.append(outcome)
        if outcome.status == "denied":
            raise Denied(outcome)
        return {**outcome.detail, "_status": outcome.status}

    def deny(self, key: str, step: str, denial: Denial, *, journal: bool = True) -> NoReturn:
        """Record a refusal as a typed outcome and stop (up to the nearest `try`)."""
        outcome = StepOutcome(key, step, "denied", denial.code.value, denial.message,
                              _jsonable(denial.details))
        if journal:
            self.settle(key, outcome)  # raises Denied, unless another run recorded first
            raise RuntimeError(f"{key}: another run of execution {self.execution_id} recorded "
                               "this step first; run the execution again to replay it")
        self.outcomes.append(outcome)
        raise Denied(outcome)

    def guard(self, key: str, step: str, thunk: Callable[[], T]) -> T:
        """Evaluate values of a step; a value the runtime refuses is that step's denial."""
        try:
            return thunk()
        except Denial as denial:
            self.deny(key, step, denial, journal=False)


def _jsonable(value: object) -> JSONValue:
    """A denial's details as the JSON the journal stores (not hashed: plain JSON is right)."""
    return json.loads(json.dumps(value, default=str))
