"""A worker keeps its database connection across tasks, with Django's per-request checks."""

from __future__ import annotations

import pytest
from celery.signals import task_postrun, task_prerun

from config.celery import app


def test_every_task_runs_between_djangos_connection_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setattr("config.celery.close_old_connections", lambda: calls.append("checked"))
    for signal in (task_prerun, task_postrun):
        signal.send(sender=None, task_id="t", task=None, args=(), kwargs={})
    assert calls == ["checked", "checked"]


def test_the_fixup_keeps_connections_across_tasks() -> None:
    from django.conf import settings

    assert settings.CELERY_DB_REUSE_MAX >= 100
    assert app.conf.get("CELERY_DB_REUSE_MAX") == settings.CELERY_DB_REUSE_MAX


