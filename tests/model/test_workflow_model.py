"""The lifecycle model over whole workflows (tests/model/workflows.py,
docs/reliability.md#workflows) against the real services and store, on SQLite and PostgreSQL.

Bounded for CI and reproducible there, as the lifecycle model's own test:
`MODEL_WORKFLOW_EXAMPLES` examples (default 60) of at most `MODEL_STEPS` steps (default 30) from
the fixed seed `MODEL_SEED` (default 21), unless `MODEL_RANDOM=1`. On the commit before the run
trees it fails at once (docs/reliability.md#workflows). The long run is
`python -m tests.model.long_run --machine workflows`.
"""

from __future__ import annotations

import os

import pytest

from tests.model.machine import run_model
from tests.model.workflows import WorkflowModel, workflow_runtime

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_whole_workflows_keep_the_runs_promises() -> None:
    run_model(WorkflowModel, workflow_runtime,
              int(os.environ.get("MODEL_WORKFLOW_EXAMPLES", "60")))
