"""A run's journal: the execution's transcript, read and written through `services.executions`.

Entries (docs/design.md#outcomes): the header (`call_id` "workflow", kind `tool_call`: the
workflow's shape digest, its contract fingerprints and the pinned inputs); a step's intent, where a
step needs one (kind `tool_call`, keyed by the step); one entry per settled step (kind
`tool_result`, keyed by the step); the final entry of a finished or denied run (kind `final`,
"workflow"). The first write of a (key, kind) wins, also against a concurrent run of the same
execution.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from dispatch.models import TranscriptEntry
from dispatch.services.executions import journal_append, journal_read
from dispatch.services.proposals import CALL_ID
from dispatch.workflows.values import StepOutcome, WorkflowRun
from protocols.jsontypes import JSONObject

HEADER = "workflow"  # the call_id of the journal header; step keys start with `steps[`
_MAX_KEY = 80  # TranscriptEntry.call_id (Proposal.call_id holds 200)


class Journal:
    """The execution's entries by kind and key, as they were when loaded plus what this run
    wrote; `put` answers the recorded payload, which is another run's when it wrote first."""

    def __init__(self, execution_id: str) -> None:
        self.execution_id = execution_id
        self.calls: dict[str, JSONObject] = {}
        self.results: dict[str, JSONObject] = {}
        self.finals: dict[str, JSONObject] = {}
        self._tables: dict[str, dict[str, JSONObject]] = {
            TranscriptEntry.Kind.TOOL_CALL: self.calls,
            TranscriptEntry.Kind.TOOL_RESULT: self.results,
            TranscriptEntry.Kind.FINAL: self.finals}
        for entry in journal_read(execution_id=execution_id):
            self._tables[entry["kind"]][entry["call_id"]] = entry["payload"]

    def put(self, key: str, payload: JSONObject, now: datetime, *,
            kind: str = TranscriptEntry.Kind.TOOL_RESULT) -> JSONObject:
        recorded = journal_append(execution_id=self.execution_id, kind=kind, call_id=key,
                                  payload=payload, now=now)
        self._tables[kind][key] = recorded
        return recorded


def step_key(path: str, loops: tuple[int, ...]) -> str:
    """The step's identity in this run: its path, and its iteration in each enclosing loop."""
    key = path + ("@" + ".".join(map(str, loops)) if loops else "")
    # A key is also the proposal's call id: printable ASCII (a match tag may be any text).
    if len(key) <= _MAX_KEY and CALL_ID.fullmatch(key):
        return key
    return "h:" + hashlib.sha256(key.encode()).hexdigest()[:60]


def run_from(final: JSONObject, execution_id: str, name: str) -> WorkflowRun:
    """The run a final journal entry records."""
    outcomes = tuple(StepOutcome(**o) for o in final["outcomes"])
    denial = StepOutcome(**final["denial"]) if final.get("denial") else None
    return WorkflowRun(execution_id, name, final["state"], outcomes, denial=denial)
