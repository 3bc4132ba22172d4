"""The embedded workflow runtime: runs a `CheckedWorkflow` through the same services and the
same dispatcher as every other caller (docs/workflows.md "Running workflows";
docs/design.md#dispatcher, #outcomes, #extensions).

    from dispatch.workflows import run_workflow, WorkflowRefused

    run = run_workflow(checked, principal=agent, inputs={"draft": resource.id})
    run.state      # "waiting" | "finished" | "denied"
    run = run_workflow(checked, principal=agent, execution_id=run.execution_id)  # resume

`runtime.py` refuses before any step and pins the inputs; `interpreter.py` runs the control flow;
`steps.py` adapts each exact-action step to its service; `delegated.py` runs a delegated `agent`
step's sub-agent under its child grant (docs/design.md#delegation), `embedded.py` an undelegated
one's agent loop under the run's own principal; `journal.py` is the run's
journal on `dispatch.services.executions`; `shape.py` walks the IR and digests its shape;
`values.py` holds the outcomes and the runtime values.
"""

from __future__ import annotations

from dispatch.workflows.runtime import run_workflow
from dispatch.workflows.shape import shape_digest
from dispatch.workflows.values import StepOutcome, WorkflowRefused, WorkflowRun

__all__ = ["StepOutcome", "WorkflowRefused", "WorkflowRun", "run_workflow", "shape_digest"]
