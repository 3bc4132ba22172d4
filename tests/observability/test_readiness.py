"""/readyz against a database whose migrations are missing (docs/design.md#running): a real
gunicorn on an empty database answers 503 naming `migrations`; once `manage.py migrate` has run,
200, with no restart. The database is a fresh SQLite file, or a fresh PostgreSQL database when
the suite runs on PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from dispatch.signing import generate_entry
from tests.support.processes import ROOT, database_url
from tests.support.web import WebServer

pytestmark = pytest.mark.slow


@pytest.fixture
def empty_database(tmp_path: Path) -> Iterator[str]:
    """The URL of a database with no table at all."""
    url = database_url()
    if url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
        return
    import psycopg

    server, _, _ = url.rpartition("/")
    name = f"readyz_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server}/{name}"
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def production_env(database: str, tmp_path: Path) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8", "PYTHONPATH": ROOT, "DJANGO_SETTINGS_MODULE": "config.settings",
            "SECRET_KEY": "readyz-test-" + uuid.uuid4().hex,
            "APP_VAR_DIR": str(tmp_path / "var"), "DATABASE_URL": database,
            "DISPATCH_EXTENSIONS": "demo.extension",
            # A PostgreSQL deployment does not start without them (docs/deployment.md#keys).
            "SIGNING_KEYS": json.dumps([generate_entry()])}


def test_readyz_names_a_database_that_does_not_answer(tmp_path: Path) -> None:
    web = WebServer(env=production_env("postgres://postgres@127.0.0.1:1/none", tmp_path),
                    log=tmp_path / "web.log", workers=1)
    web.start()
    try:
        assert web.get("/healthz")[0] == 200
        status, body = web.get("/readyz")
    finally:
        web.stop()
    assert status == 503
    assert json.loads(body) == {"status": "unavailable", "failing": ["database"], "checks": {
        "database": "failed (OperationalError)", "migrations": "not checked: no database",
        "broker": "ok"}}


def test_readyz_fails_while_migrations_are_missing_and_succeeds_after(
    empty_database: str, tmp_path: Path,
) -> None:
    env = production_env(empty_database, tmp_path)
    web = WebServer(env=env, log=tmp_path / "web.log", workers=1)
    web.start()
    try:
        status, body = web.get("/healthz")
        assert (status, json.loads(body)) == (200, {"status": "ok"})
        status, body = web.get("/readyz")
        assert status == 503, body
        found = json.loads(body)
        assert found["failing"] == ["migrations"]
        assert found["checks"]["database"] == "ok"
        assert found["checks"]["broker"] == "ok"
        assert found["checks"]["migrations"].endswith("migrations not applied")

        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT,
                       env=env, check=True, capture_output=True, timeout=300)
        status, body = web.get("/readyz")
        assert (status, json.loads(body)) == (200, {"status": "ok", "checks": {
            "database": "ok", "migrations": "ok", "broker": "ok"}})
    finally:
        web.stop()
    lines = web.log.read_text().splitlines()
    assert lines
    for line in lines:
        assert isinstance(json.loads(line), dict), line  # gunicorn's own lines too
