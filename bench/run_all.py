"""Run the benchmarks: `python bench/run_all.py [--quick] [--only NAME] [--json PATH]`.

A progress bar goes to stderr; each benchmark prints its tables to stdout, then a summary of
every target (met or missed, with its ratio to the limit). Each benchmark makes and drops its
own databases (a SQLite file under a temporary folder, a PostgreSQL `bench_<pid>_…`).

Exit status: 0 when every benchmark ran (targets missed or not), 1 when one crashed or a
correctness target failed (a double claim), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rich import box  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.progress import (  # noqa: E402
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table as RichTable  # noqa: E402

from bench.common import Context, Databases, Result, temp_root  # noqa: E402
from bench.common import Progress as BenchProgress  # noqa: E402

BENCHES = {
    "claims": "bench.claims",
    "actions": "bench.actions",
    "api": "bench.api_intake",
    "latency": "bench.approval_latency",
    "growth": "bench.growth",
    "memory": "bench.memory",
}
# Columns of words, not figures: aligned left.
TEXT_COLUMNS = ("backend", "stage", "side", "kind", "function", "statement")
# Targets whose miss is a correctness failure, not a performance one.
CORRECTNESS = ("double claims",)


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(),
                            "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as cpu:
            info["cpu"] = next((line.split(":", 1)[1].strip() for line in cpu
                                if line.startswith("model name")), "")
        with open("/proc/meminfo") as mem:
            info["memory_gib"] = round(int(mem.readline().split()[1]) / 2**20, 1)
        info["load_before"] = os.getloadavg()
    except OSError:
        pass
    return info


def print_result(out: Console, module: Any, result: Result, seconds: float) -> None:
    # Every `[name]` prefix is escaped: it is text, not rich markup.
    out.rule("[bold]" + escape(f"[{result.name}] {module.TITLE}"))
    if result.skipped:
        out.print(escape(f"[{result.name}] skipped: {result.skipped}"))
    for table in result.tables:
        # The title on a line of its own: a table's title would wrap at the table's width.
        out.print(escape(f"[{result.name}] {table.title}"), style="bold", soft_wrap=True)
        rich = RichTable(box=box.SIMPLE_HEAVY, caption=escape(table.note) or None,
                         caption_justify="left")
        for column in table.columns:
            rich.add_column(column, justify="left" if column in TEXT_COLUMNS else "right")
        for row in table.rows:
            rich.add_row(*(escape(str(cell)) for cell in row))
        out.print(rich)
    for note in result.notes:
        out.print(escape(f"  note: {note}"))
    out.print(f"  ({seconds:.0f} s)")


def summary(out: Console, results: list[Result]) -> int:
    table = RichTable(title="Targets", box=box.SIMPLE_HEAVY, title_justify="left")
    for column in ("bench", "target", "measured", "limit", "ratio", "status"):
        table.add_column(column, justify="left" if column in ("bench", "target", "status")
                         else "right")
    missed = correctness = 0
    for result in results:
        for t in result.targets:
            ratio = f"{t.ratio:.2f}" if t.limit else "-"
            status = "met" if t.met else "MISSED"
            missed += not t.met
            if not t.met and any(word in t.name for word in CORRECTNESS):
                correctness += 1
            bound = ">=" if t.at_least else "<="
            table.add_row(result.name, escape(t.name + (f" ({t.detail})" if t.detail else "")),
                          _num(t.value) + (f" {t.unit}" if t.unit else ""),
                          f"{bound} {_num(t.limit)}", ratio, status)
    out.rule("[bold]Summary")
    out.print(table)
    total = sum(len(r.targets) for r in results)
    out.print(f"targets: {total - missed} met, {missed} missed")
    return correctness


def _num(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: seconds per bench")
    parser.add_argument("--only", action="append", default=[], choices=sorted(BENCHES),
                        help="run only this benchmark (repeatable)")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    parser.add_argument("--profile", action="store_true",
                        help="also profile ours at P=1 in the actions bench (BENCH_PROFILE=1)")
    args = parser.parse_args(argv)
    if args.profile:
        os.environ["BENCH_PROFILE"] = "1"
    names = args.only or list(BENCHES)

    out = Console(width=None if sys.stdout.isatty() else 140, soft_wrap=False)
    err = Console(stderr=True)
    modules = {name: importlib.import_module(BENCHES[name]) for name in names}
    results: list[Result] = []
    shared: dict[str, Any] = {}
    crashed = 0
    started = time.monotonic()
    info = machine()
    with temp_root() as tmp:
        dbs = Databases(tmp)
        backends = dbs.backends()
        dbs.prepare()
        try:
            with Progress(TextColumn("{task.fields[bench]:>8}"), BarColumn(),
                          MofNCompleteColumn(), TimeElapsedColumn(),
                          TextColumn("{task.description}"), console=err,
                          transient=False) as bar:
                tasks = {name: bar.add_task("waiting", start=False, total=modules[name].steps(
                    args.quick, backends), bench=name) for name in names}
                for name in names:
                    module, task = modules[name], tasks[name]
                    progress = BenchProgress(
                        advance=lambda n, t=task: bar.advance(t, n),
                        describe=lambda s, t=task: bar.update(t, description=s[:60]))
                    ctx = Context(quick=args.quick, tmp=tmp, dbs=dbs, progress=progress,
                                  repeats=1 if args.quick else 3, shared=shared)
                    bar.start_task(task)
                    t0 = time.monotonic()
                    try:
                        result = module.run(ctx)
                    except Exception:
                        crashed += 1
                        result = Result(name, skipped="crashed:\n" + traceback.format_exc())
                    bar.update(task, completed=bar.tasks[task].total, description="done")
                    result.figures["seconds"] = time.monotonic() - t0
                    results.append(result)
                    bar.console.file.flush()
                    print_result(out, module, result, result.figures["seconds"])
        finally:
            dbs.close()
    correctness = summary(out, results)
    out.print(f"total {time.monotonic() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({
            "quick": args.quick, "machine": info, "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "load_after": os.getloadavg(),
            "results": [{"name": r.name, "skipped": r.skipped, "figures": r.figures,
                         "targets": [{**t.__dict__, "ratio": t.ratio} for t in r.targets],
                         "tables": [t.__dict__ for t in r.tables], "notes": r.notes}
                        for r in results]}, indent=1, default=str))
    return 1 if crashed or correctness else 0


if __name__ == "__main__":
    sys.exit(main())
