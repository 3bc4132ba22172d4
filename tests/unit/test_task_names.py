"""Services hand work to a worker by task name (dispatch/queue.py: importing `dispatch.tasks`
from a service would close an import circle, since the tasks call the services). So a name is
checked here: every `current_app.tasks[NAME]` in dispatch/ names a module constant, and every
such constant is a task that loading `dispatch.tasks` registers."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _lookups() -> list[tuple[str, str]]:
    """(module, constant) of every `current_app.tasks[CONSTANT]` under dispatch/."""
    found = []
    for path in sorted((ROOT / "dispatch").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "tasks"
                    and isinstance(node.value.value, ast.Name)
                    and node.value.value.id == "current_app"):
                module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                assert isinstance(node.slice, ast.Name), (
                    f"{module}: a task looked up by a literal, not by a checked constant")
                found.append((module, node.slice.id))
    return found


def test_every_task_looked_up_by_name_is_registered_under_that_name() -> None:
    from config.celery import app

    importlib.import_module("dispatch.tasks")
    lookups = _lookups()
    assert len(lookups) >= 5  # execute, run, notify, wake, branch
    for module, constant in lookups:
        name = getattr(importlib.import_module(module), constant)
        assert name in app.tasks, f"{module}.{constant} = {name!r} is not a registered task"
        assert app.tasks[name].run.__module__ == "dispatch.tasks", name


def test_every_task_the_beat_schedules_is_registered() -> None:
    from django.conf import settings

    from config.celery import app

    importlib.import_module("dispatch.tasks")
    schedule = settings.CELERY_BEAT_SCHEDULE
    assert schedule
    for entry, plan in schedule.items():
        assert plan["task"] in app.tasks, f"beat entry {entry}: {plan['task']} is not a task"
