"""The model-based test of the operation lifecycle (issue 21 item 6): the state machine of
tests/model/machine.py against the real services and store, on SQLite and PostgreSQL.

Bounded for CI and reproducible there: `MODEL_EXAMPLES` examples (default 100) of at most
`MODEL_STEPS` steps (default 30), derandomized (a seed derived from the test, no example
database) unless `MODEL_RANDOM=1`. The long run is a command: `python -m tests.model.long_run`
(docs/reliability.md).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.model.machine import LifecycleModel, model_runtime

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

EXAMPLES = int(os.environ.get("MODEL_EXAMPLES", "100"))
STEPS = int(os.environ.get("MODEL_STEPS", "30"))
RANDOM = os.environ.get("MODEL_RANDOM") == "1"


def test_the_operation_lifecycle_keeps_its_promises() -> None:
    with model_runtime():
        run_state_machine_as_test(LifecycleModel, settings=settings(
            max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
            derandomize=not RANDOM, database=None if not RANDOM else settings.default.database,
            suppress_health_check=list(HealthCheck), print_blob=True))
