"""docker-compose.yml works (README "Deploy with Docker Compose", docs/deployment.md).

No container engine here: the file is parsed, each service's environment is checked against what
the code reads, and each service's command runs as a local process with that environment (the
other services' hostnames mapped to loopback by the variables alone, tests/support/compose.py),
each in a working directory of its own: no process can see another's files.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from dispatch.signing import generate_entry
from tests.support.compose import (
    ROOT,
    Deployment,
    Network,
    Process,
    answers,
    compose,
    deployment,
    from_image,
    interpolate,
    localize_command,
    service_command,
    service_environment,
    service_secrets,
    wait_for,
    with_secrets,
)
from tests.support.destinations import free_port

#: The services built from the project's image.
APP_SERVICES = ("migrate", "web", "worker", "beat", "reconciler", "mcp", "destinations", "seed")
#: Long-running services the database must be migrated for.
AFTER_MIGRATE = ("web", "worker", "beat", "reconciler", "mcp")
#: Addresses people (browsers) use, not one process reaching another: localhost is right there.
PEOPLE_FACING = {"ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS", "CONSOLE_PUBLIC_URL",
                 "CONSOLE_BASE_URL"}  # CONSOLE_PUBLIC_URL's former name, still read
#: Read by the code, an address, but with a default that holds on several machines: the shared
#: cache is a table in the shared database unless a URL is given.
SHARED_BY_DEFAULT = {"CACHE_URL"}
SETTINGS_FILES = (ROOT / "config" / "settings.py", ROOT / "demo" / "settings.py")
GIVEN = {"SECRET_KEY": secrets.token_urlsafe(50), "SIGNING_KEYS": json.dumps([generate_entry()])}


def read_settings() -> set[str]:
    """Every environment variable the settings modules read."""
    found: set[str] = set()
    for path in SETTINGS_FILES:
        found |= set(re.findall(r"\benv\.\w+\(\s*\"(\w+)\"", path.read_text()))
    return found


def addresses_read() -> set[str]:
    """The variables that say where another process is: hosts, ports and URLs."""
    return {name for name in read_settings()
            if name.endswith(("_URL", "_HOST", "_PORT"))} - PEOPLE_FACING - SHARED_BY_DEFAULT


def services() -> dict[str, Any]:
    return dict(compose()["services"])


def test_every_service_is_given_every_address_its_code_reads() -> None:
    assert {"DATABASE_URL", "CELERY_BROKER_URL", "SMTP_SINK_HOST", "SMTP_SINK_PORT",
            "SMTP_SINK_LOOKUP_URL", "BANK_URL", "PUBLISHER_URL", "SOURCES_URL"} <= addresses_read()
    names = set(services())
    for service in APP_SERVICES:
        env = service_environment(service, GIVEN)
        missing = addresses_read() - set(env)
        assert not missing, f"{service} does not name {sorted(missing)}"
        for key, value in env.items():
            if key in PEOPLE_FACING:
                continue
            # No loopback where another service is meant: 127.0.0.1 is the container itself.
            assert "127.0.0.1" not in value and "localhost" not in value, (service, key, value)
            host = re.match(r"^[a-z]+://(?:[^@/]*@)?([^:/]+)", value)
            if host:
                assert host.group(1) in names, (service, key, value)
            if key.endswith("_HOST"):
                assert value in names, (service, key, value)
    # The destinations listen where other containers reach them, and keep their files to
    # themselves: no other service names their folder or mounts their volume.
    assert service_environment("destinations", GIVEN)["DESTINATIONS_BIND"] == "0.0.0.0"
    for service in set(APP_SERVICES) - {"destinations"}:
        assert "DESTINATIONS_DIR" not in service_environment(service, GIVEN)
        assert "destinations" not in str(services()[service].get("volumes", []))


def test_compose_orders_start_up_and_keeps_each_service_healthy() -> None:
    found = services()
    assert found["migrate"]["command"] == "python manage.py migrate --noinput"
    assert found["migrate"]["restart"] == "no"
    for service in AFTER_MIGRATE:
        depends = found[service]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}, service
        assert depends["postgres"] == {"condition": "service_healthy"}, service
        assert depends["redis"] == {"condition": "service_healthy"}, service
        assert found[service]["restart"] == "unless-stopped", service
    # Nothing migrates but `migrate` (web no longer migrates while worker and beat start).
    for service in set(APP_SERVICES) - {"migrate"}:
        assert "migrate" not in str(found[service]["command"]), service
    assert "/readyz" in str(found["web"]["healthcheck"]["test"])
    # The worker's and the reconciler's liveness: their heartbeat file's age, read by a probe
    # that loads nothing of the application (deploy/probe.py), not a Celery client.
    for service in ("worker", "reconciler"):
        check = found[service]["healthcheck"]["test"]
        assert check[:4] == ["CMD", "python", "/app/deploy/probe.py", "file"], check
        assert check[4] == "/var/lib/console/heartbeat", check
    for service in ("postgres", "redis", "web", "worker", "reconciler", "mcp", "destinations"):
        assert found[service]["healthcheck"]["test"], service
    # The image's own check is the web's; the services it does not fit turn it off.
    for service in ("migrate", "beat", "seed"):
        assert found[service]["healthcheck"] == {"disable": True}, service
    # The seed is a profile of its own: not started by `up`, run on demand.
    assert found["seed"]["profiles"] == ["seed"]
    assert found["seed"]["command"].startswith("python manage.py seed_demo")
    assert found["seed"]["depends_on"]["migrate"] == {
        "condition": "service_completed_successfully"}
    # Published on loopback unless told otherwise.
    for service, spec in found.items():
        for port in spec.get("ports", []):
            assert interpolate(str(port), {}).startswith("127.0.0.1:"), (service, port)


def seconds(duration: str) -> float:
    """A compose duration (`40s`, `1m30s`) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


def setting_default(name: str) -> float:
    """The default a settings module gives `name` (the test settings shorten some)."""
    found = re.search(rf'env\.float\("{name}", default=([\d.]+)\)',
                      (ROOT / "config" / "settings.py").read_text())
    assert found, name
    return float(found.group(1))


def test_each_service_gets_longer_to_stop_than_its_work_may_take() -> None:
    """docker stop's 10 s default would SIGKILL a worker in the middle of a 15 s handler call
    (docs/deployment.md#rollout)."""
    found = services()
    handler = setting_default("HANDLER_TIMEOUT_CAP")
    notify = setting_default("NOTIFY_TIMEOUT_SECONDS")
    assert handler == 15.0
    # A warm shutdown lets a task's handler call and then its notification finish.
    assert seconds(found["worker"]["stop_grace_period"]) > handler + notify
    # gunicorn's graceful timeout (30 s, its default: not set on the command line) first.
    assert "--graceful-timeout" not in found["web"]["command"]
    assert seconds(found["web"]["stop_grace_period"]) > max(30.0, handler)
    assert seconds(found["reconciler"]["stop_grace_period"]) > setting_default(
        "RECONCILE_LOOKUP_TIMEOUT")
    assert seconds(found["mcp"]["stop_grace_period"]) > setting_default("MCP_WAIT_SECONDS")


def test_the_web_runs_as_many_workers_as_web_concurrency(tmp_path: Path) -> None:
    found = services()
    assert "--workers" not in found["web"]["command"]
    assert interpolate(found["web"]["environment"]["WEB_CONCURRENCY"], {}) == "3"
    assert interpolate(found["web"]["environment"]["WEB_CONCURRENCY"],
                       {"WEB_CONCURRENCY": "5"}) == "5"
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "ENV " in dockerfile and "WEB_CONCURRENCY=3" in dockerfile
    assert "--workers" not in dockerfile
    # The compose command itself, with WEB_CONCURRENCY=2: a master and two workers.
    net = Network(set(found))
    words = localize_command(service_command("web", GIVEN), "web", net, tmp_path)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "SECRET_KEY": "w" * 50,
           "DJANGO_DEBUG": "1", "APP_VAR_DIR": str(tmp_path / "var"), "WEB_CONCURRENCY": "2"}
    master = subprocess.Popen(words, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: answers(f"http://127.0.0.1:{net.port('web', 8000)}/healthz"), 60,
                 "gunicorn")
        children = Path(f"/proc/{master.pid}/task/{master.pid}/children").read_text().split()
        assert len(children) == 2, children
    finally:
        master.terminate()
        master.wait(timeout=30)


def test_redis_keeps_an_append_only_file_on_a_volume(tmp_path: Path) -> None:
    service = services()["redis"]
    assert any(volume.endswith(":/data") for volume in service["volumes"])
    assert service["volumes"][0].split(":")[0] in compose()["volumes"]
    # The compose command, on a free port with the volume's folder: the server it starts
    # appends every write to its append-only file.
    port = free_port()
    words = [*shlex.split(service["command"]), "--port", str(port), "--dir", str(tmp_path),
             "--save", ""]
    server = subprocess.Popen(words, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port, socket_timeout=5)
        wait_for(lambda: answers_ping(client), 30, "redis-server")
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
        client.lpush("celery", b"a queued task")
        wait_for(lambda: b"a queued task" in b"".join(
            path.read_bytes() for path in tmp_path.rglob("*.aof*") if path.is_file()), 10,
            "the write in the append-only file")
        client.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


def answers_ping(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.exceptions.ConnectionError:
        return False


def test_postgresql_credentials_come_from_a_compose_secret() -> None:
    found = compose()
    assert set(found["secrets"]) == {"postgres_password"}
    assert found["secrets"]["postgres_password"] == {"file": "./secrets/postgres_password"}
    postgres = found["services"]["postgres"]
    assert "POSTGRES_PASSWORD" not in postgres["environment"]
    assert postgres["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert postgres["secrets"] == ["postgres_password"]
    for service in APP_SERVICES:
        env = service_environment(service, GIVEN)
        assert service_secrets(service) == ["postgres_password"], service
        assert env["DATABASE_PASSWORD_FILE"] == "/run/secrets/postgres_password", service
        # No password in any URL of the file.
        for value in env.values():
            assert not re.match(r"^[a-z]+://[^@/]*:[^@/]*@", value), (service, value)
    assert "/secrets/" in (ROOT / ".gitignore").read_text().split()
    assert "secrets" in (ROOT / ".dockerignore").read_text().split()


def test_the_image_runs_as_a_user_and_collects_static_files_at_build() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    users = re.findall(r"^USER (\S+)", dockerfile, re.MULTILINE)
    assert users and not users[-1].startswith(("root", "0")), users
    assert "collectstatic --noinput" in dockerfile
    ignored = (ROOT / ".dockerignore").read_text().split()
    for entry in (".git", ".venv", "var", ".env", "**/__pycache__"):
        assert entry in ignored, entry


def run_check(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = with_secrets(env, tmp_path, {"postgres_password": secrets.token_urlsafe(16)})
    clean = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONPATH": str(ROOT),
             **{k: from_image(v) for k, v in env.items() if k != "APP_VAR_DIR"},
             "APP_VAR_DIR": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120, check=False)


def test_deploy_check_is_clean_with_the_compose_environment(tmp_path: Path) -> None:
    # As README's "behind a TLS proxy" says to run it: the compose file's own environment with
    # those variables set in the shell.
    behind_tls = {**GIVEN, "ALLOWED_HOSTS": "console.example,127.0.0.1",
                  "SECURE_SSL_REDIRECT": "1", "SESSION_COOKIE_SECURE": "1",
                  "CSRF_COOKIE_SECURE": "1", "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto,https",
                  "CSRF_TRUSTED_ORIGINS": "https://console.example",
                  "CONSOLE_PUBLIC_URL": "https://console.example"}
    for service in AFTER_MIGRATE:
        result = run_check(service_environment(service, behind_tls), tmp_path)
        assert result.returncode == 0, result.stderr
        assert "System check identified no issues (0 silenced)." in result.stdout
    # Out of the box (plain HTTP on 127.0.0.1), the only findings are the three HTTPS ones that
    # plain HTTP makes true, nothing else (no weak key, no debug, no missing HSTS).
    result = run_check(service_environment("web", GIVEN), tmp_path)
    assert sorted(set(re.findall(r"security\.W\d+", result.stderr))) == [
        "security.W008", "security.W012", "security.W016"], result.stderr


# --- The services as local processes ---------------------------------------------------------


def destinations_settings(app: Deployment, tmp_path: Path) -> dict[str, Any]:
    """What a web process's settings say about the destinations, for proposals made here; the
    folder is one no process writes (the test sees no records but through the network)."""
    env = app.environment_of("web", tmp_path / "probe")
    return {"dir": str(tmp_path / "nobody-writes-here"), "bind": "127.0.0.1",
            "smtp_host": env["SMTP_SINK_HOST"], "smtp_port": int(env["SMTP_SINK_PORT"]),
            "smtp_lookup_url": env["SMTP_SINK_LOOKUP_URL"], "bank_url": env["BANK_URL"],
            "publisher_url": env["PUBLISHER_URL"], "sources_url": env["SOURCES_URL"]}


def start_stack(app: Deployment, tmp_path: Path) -> dict[str, Any]:
    """migrate (to its end), then destinations, web, worker, beat and mcp, as compose does."""
    # The image's build step: static files collected once, read by every web process.
    static = tmp_path / "image-static"
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput"], cwd=ROOT,
                   env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "SECRET_KEY": "b" * 50,
                        "APP_VAR_DIR": str(tmp_path / "build-var"), "STATIC_ROOT": str(static)},
                   check=True, capture_output=True, timeout=120)
    app.extra["STATIC_ROOT"] = str(static)
    app.run("migrate")
    started = {name: app.start(name) for name in ("destinations", "web", "worker", "beat",
                                                  "mcp")}
    web_url = f"http://127.0.0.1:{app.net.port('web', 8000)}"
    wait_for(lambda: "destinations ready" in started["destinations"].output(), 60,
             "the destinations", watch=list(started.values()))
    wait_for(lambda: answers(f"{web_url}/accounts/login/"), 90, "the web",
             watch=list(started.values()))
    wait_for(lambda: "ready." in started["worker"].output(), 90, "the worker",
             watch=list(started.values()))
    wait_for(lambda: answers(f"http://127.0.0.1:{app.net.port('mcp', 8001)}/mcp/"), 90,
             "the MCP gateway", watch=list(started.values()))
    return {"url": web_url, **started}


def run_probe(app: Deployment, check: list[str],
              process: Process) -> subprocess.CompletedProcess[str]:
    """A `["CMD", ...]` healthcheck run as compose would run it in `process`'s container."""
    assert check[0] == "CMD", check
    words = localize_command(check[1:], "probe", app.net, process.directory)
    return subprocess.run(words, cwd=process.directory, env=process.env, capture_output=True,
                          text=True, timeout=30, check=False)


def healthcheck(app: Deployment, service: str,
                process: Process) -> subprocess.CompletedProcess[str]:
    check = [interpolate(str(word), {}) for word in services()[service]["healthcheck"]["test"]]
    # Its port inside the container is the test's port for that service.
    return run_probe(app, [re.sub(r"127\.0\.0\.1:(\d+)", lambda m: (
        f"127.0.0.1:{app.net.port(service, int(m.group(1)))}"), word) for word in check], process)


def image_healthcheck(app: Deployment, web: Process) -> subprocess.CompletedProcess[str]:
    """The Dockerfile's HEALTHCHECK, run in the web's container."""
    found = re.search(r"^HEALTHCHECK .*?CMD (\[.*?\])$", (ROOT / "Dockerfile").read_text(),
                      re.MULTILINE | re.DOTALL)
    assert found, "no HEALTHCHECK in the Dockerfile"
    check = ["CMD", *json.loads(found.group(1))]
    return run_probe(app, [re.sub(r"127\.0\.0\.1:8000", f"127.0.0.1:{app.net.port('web', 8000)}",
                                  word) for word in check], web)


def settle(operation: Any, states: tuple[str, ...], seconds: float, app: Deployment) -> str:
    def settled() -> bool:
        operation.refresh_from_db()
        return operation.state in states

    wait_for(settled, seconds, f"{operation.id} to become one of {states}",
             watch=[p for p in app.processes if p.name != "migrate"])
    return str(operation.state)


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
@pytest.mark.slow
def test_the_compose_services_run_as_processes_and_complete_email_and_payment(
    tmp_path: Path, settings: Any,
) -> None:
    import urllib.request

    from django.utils import timezone

    from demo.destinations.bank_client import bank_lookup
    from demo.destinations.smtp_client import sink_lookup
    from dispatch.models import Operation
    from exact_console import Client
    from tests.conftest import make_world

    with deployment(tmp_path / "stack") as app:
        stack = start_stack(app, tmp_path)
        settings.DESTINATIONS = destinations_settings(app, tmp_path)
        world = make_world(timezone.now(), prefix="t-")  # the seed's tenant stays free
        agent = Client(stack["url"], world.owner_token, timeout=60)

        def dispatched(proposal: Any) -> Any:
            return Operation.objects.get(id=agent.dispatch(proposal.id)["operation_id"])

        # An email and a payment complete: web enqueues, the worker sends over the network.
        email, _ = world.approved_email()
        sent = dispatched(email)
        payment = world.propose_transfer(amount="12.50")
        world.grant(payment)
        paid = dispatched(payment)
        assert settle(sent, ("completed",), 60, app) == "completed"
        assert settle(paid, ("completed",), 60, app) == "completed"
        lookup_url = settings.DESTINATIONS["smtp_lookup_url"]
        assert sink_lookup(lookup_url, f"{sent.id}@console.invalid", timeout=5) is not None
        assert bank_lookup(settings.DESTINATIONS["bank_url"], paid.id, timeout=5) is not None

        # An uncertain email (the sink stored it, then dropped the connection) is reconciled by
        # beat's pass on the worker, asking the sink's lookup over HTTP: present.
        lost, _ = world.approved_email(to=["someone@lose-response.test"])
        uncertain = dispatched(lost)
        assert settle(uncertain, ("reconciled_completed",), 90, app) == "reconciled_completed"
        assert "SMTP sink holds message" in uncertain.evidence
        # One the sink never recorded (451, no-record.test) stays unknown for a human: the
        # lookup answered (no trace), it did not fail.
        unrecorded, _ = world.approved_email(to=["someone@no-record.test"])
        unknown = dispatched(unrecorded)
        wait_for(lambda: (unknown.refresh_from_db() or
                          "SMTP sink holds no message" in unknown.evidence), 90,
                 "the lookup of the unrecorded email")
        assert unknown.state == "unknown"
        # No process but the destinations holds the sink's file.
        holders = [p.name for p in app.processes
                   if list(p.directory.rglob("email.sqlite3"))]
        assert holders == ["destinations"]

        # Each healthcheck as compose runs it in the service's container, and the image's own
        # (the web's); the worker's heartbeat file is fresh while it runs, and a stale one
        # fails the check.
        for service in ("web", "worker", "mcp"):
            probed = healthcheck(app, service, stack[service])
            assert probed.returncode == 0, (service, probed.stdout + probed.stderr)
        probed = image_healthcheck(app, stack["web"])
        assert probed.returncode == 0, probed.stdout + probed.stderr
        heartbeat = stack["worker"].directory / "heartbeat"
        stack["worker"].proc.send_signal(signal.SIGSTOP)  # hung: no more heartbeats
        try:
            os.utime(heartbeat, (time.time() - 31, time.time() - 31))
            probed = healthcheck(app, "worker", stack["worker"])
            assert probed.returncode == 1 and "last touched" in probed.stdout, probed.stdout
        finally:
            stack["worker"].proc.send_signal(signal.SIGCONT)
        wait_for(lambda: healthcheck(app, "worker", stack["worker"]).returncode == 0, 30,
                 "the worker's next heartbeat")

        # Static files: collected at build, served by WhiteNoise, allowed by the CSP.
        with urllib.request.urlopen(f"{stack['url']}/accounts/login/", timeout=10) as page:
            html = page.read().decode()
            csp = page.headers["Content-Security-Policy"]
        static_paths = re.findall(r'(?:href|src)="(/static/[^"]+)"', html)
        assert static_paths, html[:2000]
        for path in static_paths:
            with urllib.request.urlopen(f"{stack['url']}{path}", timeout=10) as asset:
                assert asset.status == 200
        assert "script-src 'self'" in csp and "style-src 'self'" in csp
        agent.close()

        # The seed profile: one-shot, exits 0, prints the demo logins; its unknown email went
        # through the sink over the network and stayed unknown, as the demo means it to.
        seeded = app.run("seed").output()
        assert "Operator login: olive / " in seeded and "Admin login:    adam / " in seeded
        assert "http://localhost:8000/console/" in seeded
        assert "meant to stay unknown" not in seeded, seeded
