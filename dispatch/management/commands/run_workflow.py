"""`manage.py run_workflow FILE --agent NAME [--execution ID]`: check a workflow file, then run
it on the embedded runtime (`dispatch.workflows`) as that agent.

Checking comes first and prints diagnostics like `check_workflow` (exit 1). A clean workflow
then runs through the dispatcher: the command prints the execution id, one line per step
outcome, and `waiting` (run it again with `--execution ID` once a human has decided),
`finished`, or `denied: CODE` (exit 1). A refusal to start (changed contracts, unsupported step
kinds, bad inputs, another workflow's execution) prints `refused: CODE: MESSAGE` (exit 1).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dispatch.agent import ScriptedAdapter
from dispatch.agent.adapters import ModelAdapter, ScriptError
from dispatch.models import Principal
from dispatch.runtime import get_runtime
from dispatch.workflows import StepOutcome, WorkflowRefused, run_workflow
from protocols.jsontypes import JSONObject
from protocols.workflow import CheckedWorkflow, check_source
from protocols.workflow.report import render_text, unreadable


class Command(BaseCommand):
    help = ("Check a workflow file (docs/workflows.md) against the registered contracts, then "
            "run it as an agent through the dispatcher; resume a waiting run with --execution.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the workflow file (.yaml, .yml or .json)")
        parser.add_argument("--agent", required=True, help="the agent principal to run as")
        parser.add_argument("--execution", help="resume this execution instead of a new one")
        parser.add_argument("--input", action="append", default=[], metavar="NAME=VALUE",
                            help="a workflow input: a resource id for a handle, JSON otherwise "
                                 "(a value that is not JSON is a string); repeat for each")
        parser.add_argument("--sub-agent", action="append", default=[],
                            metavar="NAME=SCRIPT.json",
                            help="the scripted model of an agent step (a delegated step's "
                                 "sub-agent, or the run's own agent of an undelegated one; "
                                 "demo/agent_script.json format); repeat for each agent")
        parser.add_argument("--worker", action="store_true",
                            help="run handlers on a worker instead of in this process")
        parser.add_argument("--deadline-s", type=float, default=None, metavar="SECONDS",
                            help="a new run times out this many seconds after it starts "
                                 "(docs/workflows.md#deadlines)")
        parser.add_argument("--json", action="store_true", help="print the run as JSON")

    def handle(self, *args: Any, **opts: Any) -> None:
        name = opts["file"]
        try:
            text = Path(name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self.stdout.write(render_text([(name, unreadable(name, str(exc)))]))
            raise CommandError("the workflow file cannot be read", returncode=1) from None
        runtime = get_runtime()
        checked = check_source(text, runtime.registry, filename=name,
                               kinds=runtime.resource_protocols)
        if not isinstance(checked, CheckedWorkflow):
            self.stdout.write(render_text([(name, checked)]))
            raise CommandError("the workflow failed the check; nothing ran", returncode=1)
        # A delegated step's sub-agent runs only inside its step (docs/design.md#delegation).
        principal = Principal.objects.filter(name=opts["agent"], kind="agent",
                                             subagent=False).first()
        if principal is None:
            raise CommandError(f"no agent named {opts['agent']!r}", returncode=1)
        try:
            run = run_workflow(checked, principal=principal, execution_id=opts["execution"],
                               inputs=_inputs(opts["input"]) if opts["input"] else None,
                               mode="worker" if opts["worker"] else "inline",
                               agents=_sub_agents(opts["sub_agent"]), source=(text, name),
                               deadline_s=opts["deadline_s"])
        except WorkflowRefused as refused:
            self.stdout.write(f"refused: {refused.code}: {refused.message}")
            raise CommandError(f"the run was refused ({refused.code})", returncode=1) from None
        except ValueError as exc:  # a --deadline-s out of range
            raise CommandError(str(exc), returncode=1) from None
        if opts["json"]:
            self.stdout.write(json.dumps({
                "execution_id": run.execution_id, "workflow": run.workflow, "state": run.state,
                "waiting_on": run.waiting_on, "outcomes": [asdict(o) for o in run.outcomes],
                "denial": asdict(run.denial) if run.denial else None}, indent=2, default=str))
        else:
            self.stdout.write(f"execution {run.execution_id}")
            for outcome in run.outcomes:
                self.stdout.write(_line(outcome))
            self.stdout.write(f"denied: {run.denial.code}" if run.denial else run.state)
        if run.state == "denied":
            raise CommandError("the run was denied", returncode=1)


def _named(pair: str, flag: str, form: str) -> tuple[str, str]:
    """`NAME=VALUE` of a repeatable option, or the usage error naming the option."""
    name, sep, value = pair.partition("=")
    if not sep or not name:
        raise CommandError(f"{flag} takes {form}, not {pair!r}", returncode=1)
    return name, value


def _inputs(pairs: list[str]) -> JSONObject:
    values: JSONObject = {}
    for pair in pairs:
        key, raw = _named(pair, "--input", "NAME=VALUE")
        try:
            values[key] = json.loads(raw)
        except ValueError:
            values[key] = raw
    return values


def _sub_agents(pairs: list[str]) -> dict[str, ModelAdapter]:
    adapters: dict[str, ModelAdapter] = {}
    for pair in pairs:
        name, path = _named(pair, "--sub-agent", "NAME=SCRIPT.json")
        try:
            adapters[name] = ScriptedAdapter(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError, ScriptError) as exc:
            raise CommandError(f"--sub-agent {name}: {exc}", returncode=1) from None
    return adapters


def _line(outcome: StepOutcome) -> str:
    code = f" ({outcome.code})" if outcome.code else ""
    extra = ""
    for field in ("resource_id", "proposal_id", "operation_id", "reason", "delegation_id",
                  "grant_id", "agent_execution_id"):
        if field in outcome.detail:
            extra += f" {field}={outcome.detail[field]}"
    return f"{outcome.path}: {outcome.step} {outcome.status}{code}{extra}"
