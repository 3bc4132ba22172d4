"""One service call in a child process, for the race tests; prints its answer as one JSON line.

    python -m tests.support.child execute OPERATION_ID
    python -m tests.support.child dispatch PRINCIPAL_ID PROPOSAL_ID
    python -m tests.support.child decide APPROVER_ID APPROVAL_ID DIGEST
    python -m tests.support.child delegate ACTOR_ID GRANT_ID SUBJECT_NAME OPERATION SCOPE_JSON
    python -m tests.support.child revoke ADMIN_ID GRANT_ID
    python -m tests.support.child renew APPROVER_ID RENEWAL_ID DIGEST
    python -m tests.support.child cancel ACTOR_ID OPERATION_ID
    python -m tests.support.child pause ADMIN_ID OPERATION   (`-`: the whole tenant)
    python -m tests.support.child workflow PRINCIPAL_ID WORKFLOW_FILE AGENT=SCRIPT_FILE
    python -m tests.support.child wake APPROVAL_ID
    python -m tests.support.child start PRINCIPAL_ID WORKFLOW_FILE NAME=VALUE
    python -m tests.support.child branch EXECUTION_ID STEP_KEY LANE

A refusal prints `{"denied": "<code>"}`; anything else raised fails the child.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import django


def main(action: str, *args: str) -> None:
    django.setup()
    from django.utils import timezone

    from dispatch.models import Principal
    from dispatch.services.approvals import approval_decide
    from dispatch.services.authority import grant_delegate, grant_revoke
    from dispatch.services.cancellation import operation_cancel
    from dispatch.services.dispatcher import proposal_dispatch
    from dispatch.services.pauses import pause_scope, pause_set
    from dispatch.services.renewals import renewal_decide
    from dispatch.services.worker import operation_execute
    from protocols.denials import Denial

    def principal(pk: str) -> Principal:
        return Principal.objects.get(id=pk)

    actions: dict[str, Callable[..., dict[str, Any]]] = {
        "execute": lambda op: {"state": operation_execute(operation_id=op).state},
        "dispatch": lambda who, prp: {"operation_id": proposal_dispatch(
            principal=principal(who), proposal_id=prp, now=timezone.now(), enqueue=False).id},
        "decide": lambda who, apr, digest: {"state": approval_decide(
            approver=principal(who), approval_id=apr, decision="grant", digest=digest,
            now=timezone.now())[0].state},
        "delegate": lambda who, grt, subject, operation, scope: {"grant_id": grant_delegate(
            actor=principal(who), grant_id=grt, subject_name=subject, operations=[operation],
            scope=json.loads(scope), expires_at=None, now=timezone.now()).id},
        "renew": lambda who, ren, digest: {"state": renewal_decide(
            approver=principal(who), renewal_id=ren, decision="grant", digest=digest,
            now=timezone.now()).state},
        "revoke": lambda who, grt: {"revoked_at": _revoked_at(grant_revoke(
            actor=principal(who), grant_id=grt, now=timezone.now()))},
        "cancel": lambda who, op: {"state": operation_cancel(
            actor=principal(who), operation_id=op, now=timezone.now()).state},
        "pause": lambda who, operation: {"paused": pause_scope(pause_set(
            actor=principal(who), tenant=principal(who).tenant,
            operation="" if operation == "-" else operation, now=timezone.now())[0])},
        "workflow": _workflow,
        "wake": _wake,
        "start": _start,
        "branch": _branch,
    }
    try:
        answer = actions[action](*args)
    except Denial as denial:
        answer = {"denied": denial.code.value}
    print(json.dumps(answer), flush=True)


def _workflow(principal_id: str, path: str, sub_agent: str) -> dict[str, Any]:
    """Check and run a workflow file, its delegated agent driven by a scripted model."""
    from pathlib import Path

    from dispatch.agent import ScriptedAdapter
    from dispatch.models import Principal
    from dispatch.runtime import get_runtime
    from dispatch.workflows import run_workflow
    from protocols.workflow import CheckedWorkflow, check_source

    checked = check_source(Path(path).read_text(), get_runtime().registry, filename=path)
    assert isinstance(checked, CheckedWorkflow), checked
    agent, _, script = sub_agent.partition("=")
    run = run_workflow(checked, principal=Principal.objects.get(id=principal_id),
                       agents={agent: ScriptedAdapter(json.loads(Path(script).read_text()))})
    return {"state": run.state, "execution_id": run.execution_id}


def _wake(approval_id: str) -> dict[str, Any]:
    """A wake-up of the executions parked on the approval: the runs it resumed."""
    from django.utils import timezone

    from dispatch.workflows.resume import wake

    return {"resumed": [run.state for run in wake(approval_id=approval_id, now=timezone.now())]}


def _start(principal_id: str, path: str, given: str) -> dict[str, Any]:
    """Check a workflow file and start it with its source and one input, as the command does."""
    from pathlib import Path

    from dispatch.models import Principal
    from dispatch.runtime import get_runtime
    from dispatch.workflows import run_workflow
    from protocols.workflow import CheckedWorkflow, check_source

    text = Path(path).read_text()
    checked = check_source(text, get_runtime().registry, filename=path)
    assert isinstance(checked, CheckedWorkflow), checked
    name, _, value = given.partition("=")
    run = run_workflow(checked, principal=Principal.objects.get(id=principal_id),
                       inputs={name: value}, source=(text, path))
    return {"state": run.state, "execution_id": run.execution_id}


def _revoked_at(grant: Any) -> str:
    assert grant.revoked_at is not None, "grant_revoke answers the revoked grant"
    return str(grant.revoked_at.isoformat())


def _branch(execution_id: str, key: str, lane: str) -> dict[str, Any]:
    """Run one lane of a concurrent step, as the `workflow_branch` task does."""
    from django.utils import timezone

    from dispatch.workflows.branches import run_branch

    return {"lane": run_branch(execution_id, [[key, lane]], now=timezone.now())}


if __name__ == "__main__":
    main(*sys.argv[1:])
