"""The lifecycle model's long run, a command rather than a test (docs/reliability.md):

    PYTHONPATH=. python -m tests.model.long_run --examples 2000 [--steps 30] [--seed 1]
                                    [--machine workflows]
                                    [--shrink [--kinds KIND,...]] [--json figures.json]

It creates a test database (SQLite by default, PostgreSQL with `DATABASE_URL`, as the test
suite does), runs the state machine of tests/model/machine.py (`--machine workflows`: with
the runs of whole workflows of tests/model/workflows.py) for N examples with a progress
bar on stderr, counting every violation instead of stopping at the first, and prints its
figures: examples, steps (by rule), faults injected by kind, the denials the runtime answered,
and the violations found (in how many examples), each with the steps of the first example that
showed it. `--shrink` then has Hypothesis find and shrink a minimal example of each kind found.
Exit status 1 when any violation was found.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.model.long_run",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1000,
                        help="0: no long run, only --shrink of --kinds")
    parser.add_argument("--steps", type=int, default=30, help="steps per example, at most")
    parser.add_argument("--seed", type=int, default=None, help="Hypothesis's seed")
    parser.add_argument("--shrink", action="store_true",
                        help="then find and shrink a minimal example of each kind found")
    parser.add_argument("--shrink-examples", type=int, default=1000,
                        help="with --shrink: examples to look for each kind in, at least")
    parser.add_argument("--kinds", default=None,
                        help="with --shrink: these kinds (comma-separated), not those found")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    parser.add_argument("--machine", choices=("actions", "workflows"), default="actions",
                        help="single actions only, or with runs of whole workflows too")
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")
    import django

    django.setup()
    logging.disable(logging.CRITICAL)  # the runtime logs what the model makes fail, loudly
    from django.test.utils import (
        setup_databases,
        setup_test_environment,
        teardown_databases,
        teardown_test_environment,
    )

    setup_test_environment()
    # Stopped with SIGTERM, it still drops its test database (the `finally` below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    databases = setup_databases(verbosity=0, interactive=False)
    try:
        return _run(args)
    finally:
        teardown_databases(databases, verbosity=0)
        teardown_test_environment()


def _settings(examples: int, steps: int, **extra: Any) -> Any:
    from hypothesis import HealthCheck, settings

    return settings(max_examples=examples, stateful_step_count=steps, deadline=None,
                    database=None, suppress_health_check=list(HealthCheck), **extra)


def _run(args: argparse.Namespace) -> int:
    from tests.model.machine import FIGURES

    if args.examples > 0:
        _long_run(args)
    if args.shrink:
        kinds = args.kinds.split(",") if args.kinds else sorted(FIGURES.violations)
        for kind in kinds:
            _shrink(kind, args)
    return 1 if FIGURES.violations else 0


def _long_run(args: argparse.Namespace) -> None:
    from django.db import connection
    from hypothesis import Phase, seed
    from hypothesis.stateful import run_state_machine_as_test
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from tests.model.machine import FIGURES, LifecycleModel

    machine, runtime = _machine(args)

    class Recording(machine):  # type: ignore[misc, valid-type]
        record_only = True

    def factory() -> LifecycleModel:
        return Recording()

    if args.seed is not None:
        factory = seed(args.seed)(factory)
    err = Console(stderr=True)
    started = time.monotonic()
    with runtime(), Progress("[progress.description]{task.description}", BarColumn(),
                                   MofNCompleteColumn(), TimeElapsedColumn(),
                                   console=err) as progress:
        task = progress.add_task(f"lifecycle model on {connection.vendor}",
                                 total=args.examples)
        FIGURES.on_example = lambda: progress.update(
            task, completed=min(FIGURES.examples, args.examples),
            description=f"lifecycle model on {connection.vendor}, "
                        f"{sum(FIGURES.violations.values())} violations")
        run_state_machine_as_test(factory, settings=_settings(
            args.examples, args.steps, phases=[Phase.generate]))
    elapsed = time.monotonic() - started
    FIGURES.on_example = None
    figures = _report(connection.vendor, elapsed, args)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(figures, out, indent=2)


def _machine(args: argparse.Namespace) -> tuple[type, Any]:
    """The state machine `--machine` names, and the runtime it runs in."""
    if args.machine == "workflows":
        from tests.model.workflows import WorkflowModel, workflow_runtime

        return WorkflowModel, workflow_runtime
    from tests.model.machine import LifecycleModel, model_runtime

    return LifecycleModel, model_runtime


def _report(vendor: str, elapsed: float, args: argparse.Namespace) -> dict[str, Any]:
    from rich.console import Console
    from rich.table import Table

    from tests.model.machine import FIGURES

    out = Console(width=110)
    out.print(f"lifecycle model ({args.machine}), {vendor}: {FIGURES.examples} examples (and "
              f"{FIGURES.discarded} Hypothesis gave up), {FIGURES.steps} steps (at most "
              f"{args.steps} each), {elapsed:.1f} s "
              f"({elapsed / max(FIGURES.examples, 1) * 1000:.0f} ms an example)")
    for title, counts in (("steps by rule", FIGURES.rules),
                          ("faults injected", FIGURES.faults),
                          ("denials answered", FIGURES.denials),
                          ("outcomes", FIGURES.outcomes),
                          ("violations (examples showing each)", FIGURES.violations)):
        table = Table(title=title, title_justify="left")
        table.add_column("kind")
        table.add_column("count", justify="right")
        for kind, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
            table.add_row(kind, str(count))
        if not counts:
            table.add_row("none", "0")
        out.print(table)
    for kind, steps in sorted(FIGURES.first.items()):
        print(f"\nfirst example showing {kind}:")
        for step in steps:
            print(f"  {step}")
    return {"database": vendor, "examples": FIGURES.examples,
            "discarded": FIGURES.discarded, "steps": FIGURES.steps,
            "max_steps": args.steps, "seconds": round(elapsed, 1),
            "tasks_enqueued": FIGURES.tasks, "rules": dict(FIGURES.rules),
            "faults": dict(FIGURES.faults),
            "denials": dict(FIGURES.denials), "outcomes": dict(FIGURES.outcomes),
            "violations": dict(FIGURES.violations),
            "first": FIGURES.first}


def _shrink(kind: str, args: argparse.Namespace) -> None:
    """Have Hypothesis find an example of `kind` alone (every other kind only counted) and
    shrink it; print the minimal rule sequence it reports."""
    from hypothesis import Phase, seed
    from hypothesis.reporting import with_reporter
    from hypothesis.stateful import run_state_machine_as_test

    from tests.model.machine import LifecycleModel

    machine, runtime = _machine(args)

    class Shrinking(machine):  # type: ignore[misc, valid-type]
        raise_kinds = frozenset({kind})

    def factory() -> LifecycleModel:
        return Shrinking()

    if args.seed is not None:
        factory = seed(args.seed)(factory)
    budget = max(args.examples, args.shrink_examples)
    lines: list[str] = []
    started = time.monotonic()
    print(f"\nshrinking {kind} ...", file=sys.stderr)
    with runtime(), with_reporter(lines.append):
        try:
            run_state_machine_as_test(factory, settings=_settings(
                budget, args.steps,
                phases=[Phase.generate, Phase.shrink]))
        except AssertionError as exc:
            print(f"\nminimal example of {kind} ({time.monotonic() - started:.0f} s):")
            for line in [*lines, *getattr(exc, "__notes__", [])]:
                if not line.startswith(("Trying", "You can reproduce", "Explanation",
                                        "    These lines", "        /")):
                    print(f"  {line}")
            print(f"  -> {exc}")
            return
    print(f"\n{kind}: not found again within {budget} examples")


if __name__ == "__main__":
    sys.exit(main())
