from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from dispatch.agent import ResumeRefusedError, ScriptedAdapter, execution_open, execution_run
from dispatch.agent.adapters import ScriptError
from dispatch.models import Execution, Principal
from dispatch.stopping import stop_signals


class Command(BaseCommand):
    help = ("Run a scripted agent against this console's store: every tool call goes through "
            "the dispatcher; approval-protected calls wait in the console queue. The script is "
            'JSON: {"agent": NAME, "steps": [{"call": OP, "arguments": {...}, "name": L?}, '
            '{"final": TEXT}]}, with {"$result": L} for an earlier step\'s result. Prints the '
            "execution id first; pass it to --execution to resume after a restart.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("script", type=Path)
        parser.add_argument("--execution", help="resume this execution instead of a new one")
        parser.add_argument("--poll", type=float, default=0.0,
                            help="while waiting for a human, check again every N seconds "
                                 "(0: stop and print 'waiting')")
        parser.add_argument("--timeout", type=float, default=3600.0,
                            help="give up polling after this many seconds")
        parser.add_argument("--inline", action="store_true",
                            help="run handlers in this process instead of on a worker")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            script = json.loads(opts["script"].read_text())
            adapter = ScriptedAdapter(script)
        except (OSError, ValueError, ScriptError) as exc:
            raise CommandError(f"cannot read the script: {exc}") from None
        # A delegated step's sub-agent runs only inside its step (docs/design.md#delegation).
        principal = Principal.objects.filter(name=script.get("agent"), kind="agent",
                                             subagent=False).first()
        if principal is None:
            raise CommandError(f"no agent named {script.get('agent')!r}")
        if opts["execution"]:
            execution = Execution.objects.filter(id=opts["execution"],
                                                 principal=principal).first()
            if execution is None:
                raise CommandError(f"no execution {opts['execution']} of this agent")
        else:
            execution = execution_open(principal=principal, adapter=adapter, now=timezone.now())
        self.stdout.write(f"execution {execution.id}")
        self.stdout.flush()
        mode: Literal["inline", "worker"] = "inline" if opts["inline"] else "worker"
        deadline = time.monotonic() + opts["timeout"]
        reported = 0
        # SIGTERM or SIGINT while polling: stop as --poll 0 would, printing 'waiting' (resume
        # with --execution); during a step, after that step.
        with stop_signals() as stop:
            while True:
                try:
                    result = execution_run(execution_id=execution.id, adapter=adapter, mode=mode)
                except ResumeRefusedError as exc:
                    raise CommandError(str(exc)) from None
                for number, outcome in enumerate(result.outcomes[reported:], start=reported + 1):
                    code = f" ({outcome.code})" if outcome.code else ""
                    self.stdout.write(f"call-{number}: {outcome.status}{code}")
                reported = len(result.outcomes)
                self.stdout.flush()
                if (result.state == "finished" or opts["poll"] <= 0
                        or time.monotonic() > deadline or stop.wait(opts["poll"])):
                    break
        if opts["json"]:
            self.stdout.write(json.dumps({"execution_id": result.execution_id,
                                          "state": result.state, "final": result.final,
                                          "outcomes": [asdict(o) for o in result.outcomes]}))
        else:
            self.stdout.write(result.state if result.state == "waiting"
                              else f"finished: {result.final}")
