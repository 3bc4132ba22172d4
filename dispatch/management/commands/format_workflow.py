"""`manage.py format_workflow [--check] [--diff] PATH...`: write workflow files in the canonical
layout (docs/workflows.md#canonical-layout).

Thin: reads each file (a directory: its `.yaml`, `.yml` and `.json` files, recursively; `-`:
standard input, its syntax named by `--stdin-filename`), formats it with
`protocols.workflow.format.format_workflow` and rewrites it when that changes it. `--check`
writes nothing and names every file that is not formatted; `--diff` writes nothing and prints
a unified diff per such file. Exit status: 2 when a file cannot be read or is not a version 1
workflow (its diagnostics are printed; the file is left as it is), else 1 under `--check` when
a file is not formatted, else 0.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from protocols.workflow import Diagnostics
from protocols.workflow.format import format_workflow
from protocols.workflow.report import unreadable

SUFFIXES = (".yaml", ".yml", ".json")


class Command(BaseCommand):
    help = ("Write workflow files (YAML or JSON, docs/workflows.md) in the canonical layout; "
            "--check names the files that are not, --diff shows the changes.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+",
                            help="workflow files or directories; - reads standard input")
        parser.add_argument("--check", action="store_true",
                            help="write nothing; exit 1 naming every file that is not formatted")
        parser.add_argument("--diff", action="store_true",
                            help="write nothing; print a unified diff for every file that is "
                                 "not formatted")
        parser.add_argument("--stdin-filename", default="<stdin>.yaml",
                            help="the name standard input is read as (its extension picks "
                                 "YAML or JSON; default: <stdin>.yaml)")

    def handle(self, *args: Any, **opts: Any) -> None:
        write = not (opts["check"] or opts["diff"])
        failed: list[str] = []
        unformatted: list[str] = []
        for name, path in self._inputs(opts["paths"], opts["stdin_filename"]):
            try:
                text = sys.stdin.read() if path is None else path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                self.stderr.write(unreadable(name, str(exc)).items[0].render())
                failed.append(name)
                continue
            result = format_workflow(text, filename=name)
            if isinstance(result, Diagnostics):
                self.stderr.write("\n".join(d.render() for d in result))
                failed.append(name)
                continue
            if path is None and write:
                self.stdout.write(result, ending="")
                continue
            if result == text:
                continue
            unformatted.append(name)
            if opts["diff"]:
                self.stdout.write("".join(difflib.unified_diff(
                    text.splitlines(keepends=True), result.splitlines(keepends=True),
                    f"{name} (original)", f"{name} (formatted)")), ending="")
            if opts["check"]:
                self.stdout.write(f"would reformat {name}")
            elif write:
                assert path is not None
                path.write_text(result, encoding="utf-8")
                self.stdout.write(f"reformatted {name}")
        if failed:
            raise CommandError(f"{len(failed)} file(s) could not be formatted: "
                               f"{', '.join(failed)}", returncode=2)
        if opts["check"] and unformatted:
            raise CommandError(f"{len(unformatted)} file(s) would be reformatted: "
                               f"{', '.join(unformatted)}", returncode=1)

    @staticmethod
    def _inputs(paths: list[str], stdin_name: str) -> list[tuple[str, Path | None]]:
        """`(name, path)` for every file to format, `(stdin_name, None)` for standard input."""
        found: list[tuple[str, Path | None]] = []
        for name in paths:
            path = Path(name)
            if name == "-":
                found.append((stdin_name, None))
            elif path.is_dir():
                found.extend((str(p), p) for p in sorted(path.rglob("*"))
                             if p.suffix.lower() in SUFFIXES and p.is_file())
            else:
                found.append((name, path))
        return found
