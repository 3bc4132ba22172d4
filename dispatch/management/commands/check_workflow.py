"""`manage.py check_workflow FILE...`: statically check workflow files
(docs/workflows.md#typing-rules, #diagnostic-codes).

Thin: reads the files, checks them against the runtime's registered contracts with
`protocols.workflow.check_source` and prints `protocols.workflow.report`'s rendering. Exits 1
when any file has a diagnostic, 0 (with an "ok" line per file) when all are clean.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dispatch.runtime import get_runtime
from protocols.workflow import CheckedWorkflow, check_source
from protocols.workflow.report import Result, render_json, render_text, unreadable


class Command(BaseCommand):
    help = ("Check workflow files (YAML or JSON, docs/workflows.md) against the registered "
            "contracts; print diagnostics like a compiler (or JSON with --json).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+", help="workflow files (.yaml, .yml or .json)")
        parser.add_argument("--json", action="store_true", help="print the results as JSON")

    def handle(self, *args: Any, **opts: Any) -> None:
        runtime = get_runtime()
        results: list[tuple[str, Result]] = []
        for name in opts["files"]:
            try:
                text = Path(name).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                results.append((name, unreadable(name, str(exc))))
                continue
            results.append((name, check_source(text, runtime.registry, filename=name,
                                                      kinds=runtime.resource_protocols)))
        self.stdout.write(render_json(results) if opts["json"] else render_text(results))
        failed = sum(1 for _, result in results if not isinstance(result, CheckedWorkflow))
        if failed:
            raise CommandError(f"{failed} workflow file(s) failed the check", returncode=1)
