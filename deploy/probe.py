"""Container health probes that load nothing of the application (the Dockerfile's HEALTHCHECK,
docker-compose.yml's healthchecks): the standard library only, run as a file,
`python /app/deploy/probe.py ...`. Outside the application's packages on purpose: a script's
folder comes first on `sys.path`, and `config/` holds a `logging.py`.

    probe.py http URL          healthy when URL answers 2xx or 3xx within 5 s
    probe.py file PATH SECONDS healthy when PATH was modified less than SECONDS ago

`file` is the worker's liveness (docs/deployment.md#probes): the worker touches its heartbeat
file (`HEARTBEAT_FILE`) each time it sends Celery's worker heartbeat, every 2 s from its event
loop while it is connected to the broker, and the reconciler after each pass. Exit status 0
healthy, 1 not, with one line saying why.
"""

from __future__ import annotations

import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

USAGE = "usage: probe.py http URL | probe.py file PATH SECONDS"


def probe_http(url: str) -> str | None:
    """None when healthy, else why not."""
    # As a TLS proxy forwards it: SECURE_SSL_REDIRECT=1 answers it rather than redirecting.
    request = urllib.request.Request(url, headers={"X-Forwarded-Proto": "https"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310
            status = int(answer.status)
    except urllib.error.HTTPError as error:
        status = error.code
    except OSError as error:
        return f"{url}: {error}"
    return None if status < 400 else f"{url}: HTTP {status}"


def probe_file(path: str, seconds: float) -> str | None:
    try:
        age = time.time() - Path(path).stat().st_mtime
    except OSError as error:
        return f"{path}: {error.strerror or error}"
    return None if age < seconds else f"{path}: last touched {age:.0f} s ago (limit {seconds:g} s)"


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "http":
        problem = probe_http(argv[1])
    elif len(argv) == 3 and argv[0] == "file":
        problem = probe_file(argv[1], float(argv[2]))
    else:
        print(USAGE, file=sys.stderr)
        return 2
    print(problem or "ok")
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
