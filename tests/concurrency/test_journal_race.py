"""Two writers of one execution's journal race across OS processes (docs/design.md#outcomes).

Each round both processes journal the same call at the same moment, and each its own call. The
unique (execution, call_id, kind) index makes the first entry of a call the record, and both
writers hear its payload; the unique (execution, seq) index makes a writer that read a stale
last seq (PostgreSQL, READ COMMITTED) read again. Afterwards: one entry per call, seqs 1..N
without gaps or repeats.
"""

from __future__ import annotations

import multiprocessing
from collections import defaultdict
from datetime import datetime
from typing import Any

import pytest

from dispatch.models import TranscriptEntry
from dispatch.services.executions import execution_create
from tests.conftest import make_world
from tests.support.journal_race import journal_writer
from tests.support.processes import child_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WRITERS = 2
ROUNDS = 25


def test_racing_writers_of_one_execution_keep_one_entry_per_call(now: datetime) -> None:
    world = make_world(now)
    execution = execution_create(principal=world.owner, adapter="race", now=now)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WRITERS)
    results = ctx.Queue()
    env = child_env()
    procs = [ctx.Process(target=journal_writer,
                         args=(env, execution.id, ROUNDS, barrier, results, index))
             for index in range(WRITERS)]
    for proc in procs:
        proc.start()
    heard: dict[int, list[Any]] = defaultdict(list)
    for _ in range(WRITERS * ROUNDS):
        number, _index, outcome = results.get(timeout=300)
        heard[number].append(outcome)
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0

    entries = list(TranscriptEntry.objects.filter(execution=execution).order_by("seq")
                   .values_list("seq", "call_id", "payload"))
    assert [seq for seq, _, _ in entries] == list(range(1, ROUNDS * (WRITERS + 1) + 1))
    calls = [call_id for _, call_id, _ in entries]
    assert sorted(calls) == sorted({*calls})  # one entry per call id
    recorded = {call_id: payload["writer"] for _, call_id, payload in entries}
    for number in range(ROUNDS):
        # Both writers hear the one recorded payload of the shared call, whoever wrote it.
        assert heard[number] == [recorded[f"call-{number}"]] * WRITERS, (number, heard[number])
        for index in range(WRITERS):
            assert recorded[f"own-{index}-{number}"] == index
