"""Each process's PostgreSQL connections carry its kind as `application_name`
(config/process.py): `pg_stat_activity` says which process holds each connection."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from config.process import process_kind
from tests.support.compose import answers, wait_for
from tests.support.destinations import free_port
from tests.support.processes import ROOT, database_url, python_path


@pytest.mark.parametrize(("argv", "kind"), [
    (["/usr/local/bin/gunicorn", "config.wsgi", "--bind", "0.0.0.0:8000"], "console-web"),
    (["/venv/lib/python3.11/site-packages/gunicorn/__main__.py", "config.wsgi"], "console-web"),
    (["/venv/bin/uvicorn", "config.asgi:application"], "console-web"),
    (["/venv/bin/celery", "-A", "config", "worker", "--concurrency=4"], "console-worker"),
    (["/venv/bin/celery", "-A", "config", "-q", "beat", "--loglevel=INFO"], "console-beat"),
    (["/venv/lib/python3.11/site-packages/celery/__main__.py", "-A", "config", "inspect", "ping"],
     "console-celery"),
    (["manage.py", "reconcile", "--every", "5"], "console-reconcile"),
    (["/app/manage.py", "mcp_serve", "--http", "--port", "8001"], "console-mcp"),
    (["manage.py", "run_destinations"], "console-destinations"),
    (["manage.py", "migrate", "--noinput"], "console-migrate"),
    (["/venv/bin/pytest", "tests"], "console-test"),
    (["-c"], "console"),
    ([], "console"),
])
def test_the_kind_of_process_is_read_from_its_command_line(argv: list[str], kind: str) -> None:
    assert process_kind(argv) == kind


def names_connected() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT application_name FROM pg_stat_activity WHERE datname = %s",
                       [connection.settings_dict["NAME"]])
        return {name for (name,) in cursor.fetchall()}


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_pg_stat_activity_names_the_web_and_the_reconciler(tmp_path: Path) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("application_name is PostgreSQL's")
    assert "console-test" in names_connected()  # this process, by the same rule
    env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "PYTHONPATH": python_path(),
           "DJANGO_SETTINGS_MODULE": "config.test_settings", "DATABASE_URL": database_url(),
           "APP_VAR_DIR": str(tmp_path / "var"), "WEB_CONCURRENCY": "1"}
    port = free_port()
    bin_dir = Path(sys.executable).parent
    started = [subprocess.Popen(words, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
               for words in ([str(bin_dir / "gunicorn"), "config.wsgi", "--bind",
                              f"127.0.0.1:{port}"],
                             [sys.executable, "manage.py", "reconcile", "--every", "30"])]
    try:
        # /readyz asks the database: the web worker holds a connection after it.
        wait_for(lambda: answers(f"http://127.0.0.1:{port}/readyz"), 90, "the web")
        wait_for(lambda: {"console-web", "console-reconcile"} <= names_connected(), 60,
                 "both processes' connections in pg_stat_activity")
    finally:
        for proc in started:
            proc.terminate()
        for proc in started:
            proc.wait(timeout=30)
    # Gone with their processes.
    wait_for(lambda: not {"console-web", "console-reconcile"} & names_connected(), 30,
             "the connections to close")
