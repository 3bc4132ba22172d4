"""Production fails closed (docs/deployment.md#keys): with `DJANGO_DEBUG` off, a deployment that
can span machines (PostgreSQL, or a Redis broker) does not start without `SIGNING_KEYS`, in any
process, and `manage.py check --deploy` names the omission as an error. The embedded default
(SQLite and the filesystem broker, one machine) still generates its key into `APP_VAR_DIR` and
says so.

Every process here is a real one under the production settings (`config.settings`). Nothing
listens at the database and broker addresses: the refusal must come before any connection.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from dispatch.signing import generate_entry

pytestmark = pytest.mark.slow  # a dozen Django start-ups in subprocesses

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
#: Each way a deployment comes to span machines, at an address where nothing listens.
SHARED = {
    "postgres": {"DATABASE_URL": "postgres://console@127.0.0.1:1/console"},
    "redis": {"CELERY_BROKER_URL": "redis://127.0.0.1:1/0"},
}
STARTED = "process started"


def production(var_dir: Path, **extra: str) -> dict[str, str]:
    """Only what the test gives: production settings, DEBUG off, a secret key."""
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8", "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_DEBUG": "0", "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "console.example", "APP_VAR_DIR": str(var_dir), **extra}


def run(
    env: dict[str, str], *command: str, timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run(env, sys.executable, "manage.py", *args)


@pytest.mark.parametrize("shared", sorted(SHARED))
def test_the_deploy_check_names_missing_signing_keys_as_an_error(
    tmp_path: Path, shared: str,
) -> None:
    done = manage(production(tmp_path, **SHARED[shared]), "check", "--deploy")
    assert done.returncode == 1, done.stdout + done.stderr
    errors = done.stderr.partition("ERRORS:")[2].partition("WARNINGS:")[0]
    assert "(dispatch.E011)" in errors and "SIGNING_KEYS" in errors, done.stderr
    assert next(iter(SHARED[shared])) in errors, done.stderr  # what makes it shared


#: Every kind of process a deployment runs, each as it is started (docker-compose.yml).
PROCESSES = {
    "manage.py command": [sys.executable, "manage.py", "shell", "-c", f"print({STARTED!r})"],
    "manage.py check (without --deploy)": [sys.executable, "manage.py", "check"],
    "web (WSGI)": [sys.executable, "-c", f"import config.wsgi; print({STARTED!r})"],
    "web (ASGI)": [sys.executable, "-c", f"import config.asgi; print({STARTED!r})"],
    "worker": [str(BIN / "celery"), "-A", "config", "worker", "--pool=solo", "--loglevel=INFO"],
    "beat": [str(BIN / "celery"), "-A", "config", "beat", "--loglevel=INFO",
             "--schedule={var}/celerybeat-schedule"],
    "mcp": [sys.executable, "manage.py", "mcp_serve", "--http", "--port", "1"],
}


@pytest.mark.parametrize("process", sorted(PROCESSES))
def test_a_shared_deployment_without_signing_keys_does_not_start(
    tmp_path: Path, process: str,
) -> None:
    # The database is shared; the broker stays the filesystem one, so that a process that does
    # start (the old behaviour) starts for real rather than failing to reach a broker.
    env = production(tmp_path, **SHARED["postgres"],
                     CELERY_BROKER_URL="filesystem://")
    try:
        done = run(env, *(word.format(var=tmp_path) for word in PROCESSES[process]),
                   timeout=45)
    except subprocess.TimeoutExpired as running:
        pytest.fail(f"{process} started and kept running without SIGNING_KEYS: "
                    f"{(running.stderr or b'')[-2000:]!r}")
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert STARTED not in done.stdout
    assert "SIGNING_KEYS" in output, output
    assert not (tmp_path / "signing-keys.json").exists()  # no key of its own made either


def test_a_redis_broker_alone_makes_a_deployment_shared(tmp_path: Path) -> None:
    done = run(production(tmp_path, **SHARED["redis"]), *PROCESSES["manage.py command"])
    assert done.returncode != 0 and "SIGNING_KEYS" in done.stderr, done.stderr


def keys_env() -> dict[str, str]:
    return {"SIGNING_KEYS": json.dumps([{**generate_entry(), "kid": "shared-key"}])}


def test_a_shared_deployment_with_signing_keys_starts_and_signs_with_them(
    tmp_path: Path,
) -> None:
    env = production(tmp_path, **SHARED["postgres"], **SHARED["redis"], **keys_env())
    done = manage(env, "shell", "-c",
                  "from dispatch.signing import current_key; print(current_key().kid)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "shared-key"
    checked = manage(env, "check", "--deploy")
    assert checked.returncode == 0, checked.stderr
    assert "dispatch.E011" not in checked.stderr


def test_the_embedded_default_generates_its_key_into_the_var_folder_and_says_so(
    tmp_path: Path,
) -> None:
    env = production(tmp_path)
    done = manage(env, "shell", "-c",
                  "from dispatch.signing import current_key; print(current_key().kid)")
    assert done.returncode == 0, done.stderr
    stored = json.loads((tmp_path / "signing-keys.json").read_text())
    assert done.stdout.splitlines()[-1] == stored[0]["kid"]
    assert "generated a new Ed25519 signing key" in done.stderr
    assert "SIGNING_KEYS" in done.stderr  # and what production sets instead
    checked = manage(env, "check", "--deploy")
    assert checked.returncode == 0, checked.stderr
    assert "dispatch.E011" not in checked.stderr


def test_debug_runs_a_shared_deployment_without_signing_keys(tmp_path: Path) -> None:
    # What the test suite and development do: DJANGO_DEBUG on PostgreSQL and Redis.
    env = production(tmp_path, **SHARED["postgres"], **SHARED["redis"], DJANGO_DEBUG="1")
    done = run(env, *PROCESSES["manage.py command"])
    assert done.returncode == 0, done.stderr
    assert STARTED in done.stdout
