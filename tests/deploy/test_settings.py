"""Production settings: secure when `DJANGO_DEBUG` is off, each from the environment."""

from __future__ import annotations

import os
import re
import runpy
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured

from tests.support.compose import with_secrets

ROOT = Path(__file__).resolve().parents[2]
#: What `config/settings.py` reads; cleared so that only the test's own values count.
SETTING_VARIABLES = [
    "DJANGO_DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "CACHE_URL",
    "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE",
    "SECURE_PROXY_SSL_HEADER", "CSRF_TRUSTED_ORIGINS",
]


def production_environment(var_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in SETTING_VARIABLES and not k.startswith("DJANGO_")}
    env.update(DJANGO_SETTINGS_MODULE="config.settings", DJANGO_DEBUG="0",
               SECRET_KEY=secrets.token_urlsafe(50), ALLOWED_HOSTS="console.example",
               APP_VAR_DIR=str(var_dir), **extra)
    return env


def test_production_settings_pass_the_deploy_check(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=production_environment(tmp_path), capture_output=True, text=True,
        timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout
    assert "WARNING" not in result.stderr


def load_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> dict[str, Any]:
    """The settings module's values under `env`, without touching the running settings."""
    for name in SETTING_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("APP_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("SECRET_KEY", "x" * 50)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(ROOT / "config" / "settings.py"))


HTTPS = ["SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE",
         "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD"]


def test_https_is_on_by_default_when_debug_is_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    values = load_settings(monkeypatch, tmp_path, DJANGO_DEBUG="0")
    assert all(values[name] is True for name in HTTPS), {n: values[n] for n in HTTPS}
    assert values["SECURE_HSTS_SECONDS"] == 365 * 24 * 3600
    assert values["SECURE_PROXY_SSL_HEADER"] is None
    assert values["CSRF_TRUSTED_ORIGINS"] == []
    assert len(values["AUTH_PASSWORD_VALIDATORS"]) == 4


def test_debug_serves_plain_http(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # What tests and scripts/run.sh use: the development server speaks HTTP only.
    values = load_settings(monkeypatch, tmp_path, DJANGO_DEBUG="1")
    assert all(values[name] is False for name in HTTPS)
    assert values["SECURE_HSTS_SECONDS"] == 0


def test_each_https_setting_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    values = load_settings(
        monkeypatch, tmp_path, DJANGO_DEBUG="0", SECURE_SSL_REDIRECT="0",
        SESSION_COOKIE_SECURE="0", CSRF_COOKIE_SECURE="0", SECURE_HSTS_SECONDS="600",
        SECURE_HSTS_INCLUDE_SUBDOMAINS="0", SECURE_HSTS_PRELOAD="0",
        SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto,https",
        CSRF_TRUSTED_ORIGINS="https://console.example,https://ops.example")
    assert all(values[name] is False for name in HTTPS)
    assert values["SECURE_HSTS_SECONDS"] == 600
    assert values["SECURE_PROXY_SSL_HEADER"] == ("HTTP_X_FORWARDED_PROTO", "https")
    assert values["CSRF_TRUSTED_ORIGINS"] == ["https://console.example", "https://ops.example"]


@pytest.mark.parametrize("header", ["X-Forwarded-Proto", "X-Forwarded-Proto,", ",https",
                                    "a,b,c"])
def test_a_proxy_header_without_its_value_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, header: str,
) -> None:
    with pytest.raises(ImproperlyConfigured, match="SECURE_PROXY_SSL_HEADER"):
        load_settings(monkeypatch, tmp_path, DJANGO_DEBUG="0", SECURE_PROXY_SSL_HEADER=header)


def compose_environment() -> dict[str, str]:
    """docker-compose.yml's app environment, as Compose resolves it with nothing else set."""
    raw = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["x-app"]["environment"]

    def resolve(value: str) -> str:
        # ${NAME:-default} gives the default; ${NAME:?message} needs a value: the test's.
        return re.sub(r"\$\{(\w+):([-?])([^}]*)\}",
                      lambda m: m.group(3) if m.group(2) == "-" else "s" * 50, value)

    return {name: resolve(str(value)) for name, value in raw.items()}


def test_docker_compose_serves_plain_http_with_debug_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    env = compose_environment()
    assert "DJANGO_DEBUG" not in env
    # The compose secrets, mounted as files (tests/support/compose.py).
    env = with_secrets(env, tmp_path, {"postgres_password": "pa55word"})
    values = load_settings(monkeypatch, tmp_path, **env)
    assert values["DATABASES"]["default"]["PASSWORD"] == "pa55word"
    assert values["DEBUG"] is False
    # http://localhost:8000 must work: no redirect to HTTPS, cookies a browser keeps over HTTP.
    assert values["SECURE_SSL_REDIRECT"] is False
    assert values["SESSION_COOKIE_SECURE"] is False
    assert values["CSRF_COOKIE_SECURE"] is False
    assert values["SECURE_PROXY_SSL_HEADER"] is None
