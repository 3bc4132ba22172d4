"""`manage.py check_actions [PATH...]`: validate HTTP action files (docs/actions.md).

Thin: reads the files of `ACTIONS_DIR` (or the files and folders named) with
`dispatch.http_actions` and prints one line per diagnostic, `file:line:column: key: message`.
With no diagnostic it also builds the runtime, which refuses a name another contract holds under
another fingerprint. Exits 1 on any diagnostic, 0 (with an "ok" line per action) otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from dispatch.http_actions import SUFFIXES, ActionsError, actions_read_files
from protocols.http_actions import ActionDiagnostic


class Command(BaseCommand):
    help = ("Check HTTP action files (YAML or JSON, docs/actions.md): those of ACTIONS_DIR, or "
            "the files and folders named; print each problem as file:line:column: key: message.")
    # An invalid file is what this command reports: no system check refuses to run it first.
    requires_system_checks: list[str] = []  # noqa: RUF012 - BaseCommand declares it so

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="*", help="action files or folders (default: "
                                                     "ACTIONS_DIR)")

    def handle(self, *args: Any, **opts: Any) -> None:
        named = opts["paths"] or ([settings.ACTIONS_DIR] if settings.ACTIONS_DIR else [])
        if not named:
            self.stdout.write("ACTIONS_DIR is not set: no HTTP action to check")
            return
        files: list[Path] = []
        found: list[ActionDiagnostic] = []
        for name in named:
            path = Path(name)
            if path.is_dir():
                files.extend(sorted(p for p in path.iterdir() if p.suffix.lower() in SUFFIXES))
            elif path.is_file():
                files.append(path)
            else:
                found.append(ActionDiagnostic(name, 0, 0, "", "no such file or folder"))
        specs, problems = actions_read_files(files)
        found.extend(problems)
        if not found and not opts["paths"]:
            found.extend(self._runtime_problems())
        for diagnostic in found:
            self.stdout.write(diagnostic.render())
        if found:
            raise CommandError(f"{len(found)} problem(s) in HTTP action files", returncode=1)
        for spec in specs:
            self.stdout.write(f"{spec.file}: ok: {spec.name} version {spec.version}")

    @staticmethod
    def _runtime_problems() -> list[ActionDiagnostic]:
        from dispatch.runtime import get_runtime

        get_runtime.cache_clear()
        try:
            get_runtime()
        except ActionsError as error:
            return error.diagnostics
        return []
