"""Run docker-compose.yml's services as local processes, without a container engine.

Each service's command runs as it is written there, with the environment Compose would give it,
but with the other services' hostnames mapped to loopback and their ports to free ones, by the
variables alone (`localize`): the code reads nothing but its environment. Every process gets a
working directory and an `APP_VAR_DIR` of its own, so nothing is shared but PostgreSQL (or the
test's database), Redis and the network.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dispatch.signing import generate_entry
from tests.support.destinations import free_port
from tests.support.processes import ROOT as ROOT_DIR
from tests.support.processes import database_url, python_path
from tests.support.workers import require_redis

ROOT = Path(ROOT_DIR)
COMPOSE_FILE = ROOT / "docker-compose.yml"
BIN = Path(sys.executable).parent
#: The image's working directory for the app's own files (Dockerfile `APP_VAR_DIR`).
IMAGE_VAR_DIR = "/var/lib/console"
#: Where the image holds the code (Dockerfile `WORKDIR`): this checkout, here.
IMAGE_APP_DIR = "/app"
#: Where Compose mounts each of a service's secrets (`secrets:`), as a file named after it.
SECRETS_DIR = "/run/secrets/"
LOOPBACK = "127.0.0.1"
_URL = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*)://(?:(?P<auth>[^@/]*)@)?(?P<host>[^:/]+)"
                  r"(?::(?P<port>\d+))?(?P<rest>.*)$")


def compose() -> dict[str, Any]:
    """docker-compose.yml, parsed (anchors and merge keys resolved)."""
    return dict(yaml.safe_load(COMPOSE_FILE.read_text()))


def interpolate(value: str, given: Mapping[str, str]) -> str:
    """Compose's `${NAME:-default}` / `${NAME:?message}` / `${NAME}` with `given` as the shell's
    environment; `$$` is a literal `$`."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3) or ""
        if name in given and (given[name] or op is None):
            return given[name]
        if op == ":?":
            raise KeyError(f"{name}: {arg}")
        return arg

    value = re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", one, value)
    return value.replace("$$", "$")


def service_environment(name: str, given: Mapping[str, str]) -> dict[str, str]:
    """The environment Compose gives service `name` when the shell holds `given`."""
    raw = compose()["services"][name].get("environment") or {}
    return {key: interpolate(str(value), given) for key, value in raw.items()}


def service_secrets(name: str) -> list[str]:
    """The compose secrets mounted into service `name`."""
    return [str(secret) for secret in compose()["services"][name].get("secrets", [])]


def with_secrets(env: Mapping[str, str], directory: Path,
                 values: Mapping[str, str]) -> dict[str, str]:
    """`env` with each `*_FILE` under /run/secrets/ pointing at a file of `directory` that holds
    the secret's value from `values`, as Compose mounts it."""
    out = dict(env)
    for key, value in env.items():
        if key.endswith("_FILE") and value.startswith(SECRETS_DIR):
            name = value[len(SECRETS_DIR):]
            path = directory / "run-secrets" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(values[name] + "\n")
            out[key] = str(path)
    return out


def service_command(name: str, given: Mapping[str, str]) -> list[str]:
    command = compose()["services"][name]["command"]
    words = shlex.split(command) if isinstance(command, str) else list(command)
    return [interpolate(word, given) for word in words]


@dataclass
class Network:
    """Where each service of the compose file is reached from the test machine."""

    services: set[str]
    #: (service, port in compose) -> port on loopback.
    ports: dict[tuple[str, int], int] = field(default_factory=dict)
    #: Whole-URL replacements for a service whose server the test provides (PostgreSQL: the
    #: test database; Redis: the test broker).
    urls: dict[str, str] = field(default_factory=dict)

    def port(self, service: str, port: int) -> int:
        if (service, port) not in self.ports:
            self.ports[(service, port)] = free_port()
        return self.ports[(service, port)]

    def url(self, service: str, port: int, rest: str = "") -> str:
        return f"http://{LOOPBACK}:{self.port(service, port)}{rest}"


def from_image(value: str) -> str:
    """A path into the image's code (`/app/...`, e.g. `ACTIONS_DIR`) as this checkout's."""
    if value == IMAGE_APP_DIR or value.startswith(IMAGE_APP_DIR + "/"):
        return str(ROOT) + value[len(IMAGE_APP_DIR):]
    return value


def localize(env: Mapping[str, str], net: Network, var_dir: Path) -> dict[str, str]:
    """Map every other service's hostname to loopback and its port to the test's, the image's
    directory to `var_dir`, and bind addresses to loopback, in the values alone."""
    out: dict[str, str] = {}
    for key, value in env.items():
        match = _URL.match(value)
        if match and match.group("host") in net.services:
            host = match.group("host")
            if host in net.urls:
                value = net.urls[host]
            else:
                port = int(match.group("port") or 80)
                value = (f"{match.group('scheme')}://{LOOPBACK}:{net.port(host, port)}"
                         f"{match.group('rest')}")
        elif value in net.services or value == "0.0.0.0":
            value = LOOPBACK
        out[key] = from_image(value).replace(IMAGE_VAR_DIR, str(var_dir))
    # A bare port belongs to the service its sibling *_HOST variable names.
    for key, value in env.items():
        if key.endswith("_PORT") and value.isdigit():
            sibling = env.get(key[: -len("_PORT")] + "_HOST")
            if sibling in net.services:
                out[key] = str(net.port(sibling, int(value)))
    return out


def localize_command(words: list[str], service: str, net: Network, var_dir: Path) -> list[str]:
    """The same command on this machine: the venv's programs, the checkout's manage.py, and a
    listening address mapped like the environment."""
    out: list[str] = []
    for index, word in enumerate(words):
        if index == 0 and word == "python":
            word = sys.executable
        elif index == 0 and (BIN / word).exists():
            word = str(BIN / word)
        elif word == "manage.py":
            word = str(ROOT / "manage.py")
        elif word.startswith(IMAGE_APP_DIR + "/"):
            word = from_image(word)
        elif re.fullmatch(r"0\.0\.0\.0:\d+", word):
            word = f"{LOOPBACK}:{net.port(service, int(word.split(':')[1]))}"
        elif word == "0.0.0.0":
            word = LOOPBACK
        elif index > 0 and words[index - 1] == "--port" and word.isdigit():
            word = str(net.port(service, int(word)))
        out.append(word.replace(IMAGE_VAR_DIR, str(var_dir)))
    return out


@dataclass
class Process:
    name: str
    proc: subprocess.Popen[bytes]
    directory: Path
    env: dict[str, str]

    @property
    def log(self) -> Path:
        return self.directory / "output.log"

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the process and everything it started: a crash, not a shutdown."""
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class Deployment:
    """Compose services started as local processes on one `Network`."""

    base: Path
    net: Network
    #: The shell environment `docker compose` would be run from (SECRET_KEY, ...).
    given: dict[str, str]
    #: Variables added to every process, beyond the compose file's (test speed-ups only).
    extra: dict[str, str] = field(default_factory=dict)
    #: The value of each compose secret (`secrets:`), mounted as a file into each process that
    #: names it. The test's PostgreSQL trusts loopback, so any password lets it in.
    secrets: dict[str, str] = field(
        default_factory=lambda: {name: uuid.uuid4().hex for name in compose().get("secrets", {})})
    processes: list[Process] = field(default_factory=list)

    def environment_of(self, service: str, directory: Path) -> dict[str, str]:
        env = with_secrets(localize(service_environment(service, self.given), self.net,
                                    directory), directory, self.secrets)
        # Nothing of the test run's own environment: a clean process, as in a container.
        return {"PATH": os.environ["PATH"], "HOME": str(directory), "LANG": "C.UTF-8",
                "PYTHONPATH": python_path(), "PYTHONUNBUFFERED": "1", **env, **self.extra}

    def command_of(self, service: str, directory: Path) -> list[str]:
        return localize_command(service_command(service, self.given), service, self.net,
                                directory)

    def start(self, service: str, *, name: str | None = None,
              command: list[str] | None = None) -> Process:
        """Start `service` (as `name`, e.g. its second replica) in a directory of its own."""
        name = name or service
        directory = self.base / name
        directory.mkdir(parents=True, exist_ok=True)
        env = self.environment_of(service, directory)
        words = command or self.command_of(service, directory)
        with (directory / "output.log").open("wb") as log:
            proc = subprocess.Popen(words, cwd=directory, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        process = Process(name, proc, directory, env)
        self.processes.append(process)
        return process

    def run(self, service: str, *, timeout: float = 180) -> Process:
        """Run a one-shot service to its end; it must exit 0 (`service_completed_successfully`)."""
        process = self.start(service)
        try:
            process.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
        assert process.proc.returncode == 0, process.output()
        return process

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            process.stop()


def wait_for(condition: Callable[[], object], seconds: float, what: str,
             watch: list[Process] | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        for process in watch or []:
            if not process.alive():
                raise AssertionError(f"{process.name} exited while waiting for {what}:\n"
                                     f"{process.output()[-4000:]}")
        time.sleep(0.25)
    raise AssertionError(f"timed out after {seconds}s waiting for {what}")


def answers(url: str) -> bool:
    """Whether an HTTP server answers `url` at all (any status)."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or LOOPBACK, parts.port, timeout=2)
    try:
        connection.request("GET", parts.path or "/")
        return connection.getresponse().status < 500
    except OSError:
        return False
    finally:
        connection.close()


@contextmanager
def deployment(base: Path, **extra: str) -> Iterator[Deployment]:
    """The compose network mapped to this machine: the test database as `postgres`, the test
    Redis as `redis` (a queue of the test's own), everything else on free loopback ports."""
    broker = require_redis()
    services = set(compose()["services"])
    net = Network(services, urls={"postgres": database_url(), "redis": broker})
    given = {"SECRET_KEY": uuid.uuid4().hex * 2,
             "SIGNING_KEYS": json.dumps([generate_entry()])}
    found = Deployment(base, net, given,
                       extra={"CELERY_QUEUE": f"compose-{uuid.uuid4().hex[:8]}", **extra})
    try:
        yield found
    finally:
        found.stop_all()
