"""Every setting, secrets first, may come from a file (docs/deployment.md#secrets): `X_FILE`
names a file whose content (less its trailing newline) is `X`'s value, read when the settings
load. Both `X` and `X_FILE` set, or a file that cannot be read, stops the settings with an error
that names the variable and never shows a value."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from dispatch.signing import generate_entry
from tests.deploy.test_fail_closed import SHARED, manage, production

ROOT = Path(__file__).resolve().parents[2]
#: Cleared, with their `_FILE` forms, so that only the test's own values count.
CLEARED = ["DJANGO_DEBUG", "SECRET_KEY", "SIGNING_KEYS", "DATABASE_URL", "DATABASE_PASSWORD",
           "CELERY_BROKER_URL", "CACHE_URL", "NOTIFY_WEBHOOKS", "METRICS_TOKEN",
           "DISPATCH_EXTENSIONS"]


def load(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> dict[str, Any]:
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"{name}_FILE", raising=False)
    monkeypatch.setenv("APP_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.setenv("DJANGO_DEBUG", "0")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(ROOT / "config" / "settings.py"))


def secret_file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


def test_secrets_come_from_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    keys = json.dumps([generate_entry()])
    hooks = [{"url": "https://hooks.example/approvals", "secret": "whsec_" + "a" * 32}]
    values = load(
        monkeypatch, tmp_path,
        # As `echo` or an editor writes them: one trailing newline, which is not the value's.
        SECRET_KEY_FILE=secret_file(tmp_path, "secret-key", "k" * 50 + "\n"),
        SIGNING_KEYS_FILE=secret_file(tmp_path, "signing-keys", keys + "\n"),
        DATABASE_URL_FILE=secret_file(
            tmp_path, "database-url", "postgres://console:pa55word@db.internal:5432/console\n"),
        CELERY_BROKER_URL_FILE=secret_file(
            tmp_path, "broker-url", "redis://:br0ker@redis.internal:6379/0\n"),
        CACHE_URL_FILE=secret_file(tmp_path, "cache-url", "redis://:c4che@redis.internal:6379/1"),
        NOTIFY_WEBHOOKS_FILE=secret_file(tmp_path, "webhooks", json.dumps(hooks)),
        METRICS_TOKEN_FILE=secret_file(tmp_path, "metrics-token", "scrape-me\n"))
    assert values["SECRET_KEY"] == "k" * 50
    assert values["SIGNING_KEYS"] == keys
    database = values["DATABASES"]["default"]
    assert (database["HOST"], database["PASSWORD"]) == ("db.internal", "pa55word")
    assert values["CELERY_BROKER_URL"] == "redis://:br0ker@redis.internal:6379/0"
    assert "c4che" in str(values["CACHES"]["shared"]["LOCATION"])
    assert values["NOTIFY_WEBHOOKS"] == hooks
    assert values["METRICS_TOKEN"] == "scrape-me"


def test_the_database_password_comes_from_its_own_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """The file compose mounts for PostgreSQL's image (POSTGRES_PASSWORD_FILE) serves the app as
    DATABASE_PASSWORD_FILE: the URL holds no password (docker-compose.yml)."""
    values = load(monkeypatch, tmp_path, SECRET_KEY="s" * 50,
                  DATABASE_URL="postgres://console@postgres:5432/console",
                  DATABASE_PASSWORD_FILE=secret_file(tmp_path, "postgres_password", "s3cret\n"))
    database = values["DATABASES"]["default"]
    assert (database["USER"], database["PASSWORD"]) == ("console", "s3cret")
    # A password in the URL too: two answers, refused without either value.
    with pytest.raises(ImproperlyConfigured, match="DATABASE_PASSWORD") as refused:
        load(monkeypatch, tmp_path, SECRET_KEY="s" * 50,
             DATABASE_URL="postgres://console:in-url@postgres:5432/console",
             DATABASE_PASSWORD_FILE=secret_file(tmp_path, "postgres_password", "s3cret"))
    assert "in-url" not in str(refused.value) and "s3cret" not in str(refused.value)


def test_a_variable_and_its_file_both_set_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        load(monkeypatch, tmp_path, SECRET_KEY="in-the-environment-" + "x" * 40,
             SECRET_KEY_FILE=secret_file(tmp_path, "secret-key", "in-the-file-" + "y" * 40))
    message = str(refused.value)
    assert "SECRET_KEY" in message and "SECRET_KEY_FILE" in message
    assert "in-the-environment" not in message and "in-the-file" not in message


@pytest.mark.parametrize("problem", ["missing", "unreadable", "a folder"])
def test_a_file_that_cannot_be_read_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, problem: str,
) -> None:
    path = tmp_path / "signing-keys"
    if problem == "unreadable":
        path.write_bytes(b"\xff\xfe not text")  # not UTF-8
    elif problem == "a folder":
        path.mkdir()
    with pytest.raises(ImproperlyConfigured, match="SIGNING_KEYS_FILE"):
        load(monkeypatch, tmp_path, SECRET_KEY="s" * 50, SIGNING_KEYS_FILE=str(path))


def test_a_shared_deployment_starts_on_keys_from_a_file(tmp_path: Path) -> None:
    keys = secret_file(tmp_path, "signing-keys",
                       json.dumps([{**generate_entry(), "kid": "from-a-file"}]) + "\n")
    secret = secret_file(tmp_path, "secret-key", "f" * 50 + "\n")
    env = production(tmp_path / "var", **SHARED["postgres"], SIGNING_KEYS_FILE=keys,
                     SECRET_KEY_FILE=secret)
    del env["SECRET_KEY"]
    done = manage(env, "shell", "-c", "from django.conf import settings; "
                  "from dispatch.signing import current_key; "
                  "print(current_key().kid, settings.SECRET_KEY == 'f' * 50)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].split() == ["from-a-file", "True"]
    checked = manage(env, "check", "--deploy")
    assert checked.returncode == 0, checked.stderr
