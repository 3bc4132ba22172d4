"""The model-based test of the operation lifecycle: the state machine of tests/model/machine.py
against the real services and store, on SQLite and PostgreSQL.

Bounded for CI and reproducible there: `MODEL_EXAMPLES` examples (default 100) of at most
`MODEL_STEPS` steps (default 30), generated from the fixed seed `MODEL_SEED` (default 21, no
example database), unless `MODEL_RANDOM=1`. Seed 21's first 100 examples find the runtime's
earlier defects (the run before the attempt owner fails in its first examples, shrunk to three
steps: docs/reliability.md), where the seed Hypothesis derives from the test's name did not.
The long run is a command: `python -m tests.model.long_run` (docs/reliability.md).
"""

from __future__ import annotations

import os

import pytest

from tests.model.machine import LifecycleModel, model_runtime, run_model

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_the_operation_lifecycle_keeps_its_promises() -> None:
    run_model(LifecycleModel, model_runtime, int(os.environ.get("MODEL_EXAMPLES", "100")))
