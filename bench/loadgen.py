"""A small closed-loop HTTP load generator: `python -m bench.loadgen SPEC_JSON`.

Runs in its own process, so that it never shares an interpreter with the server. Threads send
requests over loopback until `requests` have been sent or `seconds` have passed, whichever
comes first, and it prints one JSON line: counts by status, latencies, elapsed time.
Only loopback addresses are accepted.
"""

from __future__ import annotations

import http.client
import ipaddress
import itertools
import json
import sys
import threading
import time
from typing import Any
from urllib.parse import urlsplit


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def run(spec: dict[str, Any]) -> dict[str, Any]:
    url = urlsplit(spec["url"])
    if not _loopback(url.hostname or ""):
        raise SystemExit(f"refusing a non-loopback target: {url.hostname}")
    method = spec.get("method", "GET")
    headers = dict(spec.get("headers", {}))
    bodies: list[bytes] = [b.encode() for b in spec.get("bodies", [])] or [b""]
    total = int(spec["requests"])
    deadline = time.monotonic() + float(spec["seconds"])
    tickets = itertools.count()
    lock = threading.Lock()
    statuses: dict[str, int] = {}
    latencies: list[float] = []
    samples: list[str] = []

    def worker() -> None:
        conn: http.client.HTTPConnection | None = None
        while time.monotonic() < deadline:
            n = next(tickets)
            if n >= total:
                break
            body = bodies[n % len(bodies)]
            t0 = time.perf_counter()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
                conn.request(method, url.path, body=body or None, headers=headers)
                response = conn.getresponse()
                payload = response.read()
                status = str(response.status)
                if response.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as exc:
                status, payload = f"error:{type(exc).__name__}", str(exc).encode()
                if conn is not None:
                    conn.close()
                conn = None
            elapsed = time.perf_counter() - t0
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
                latencies.append(elapsed)
                if status != str(spec.get("expect", 200)) and len(samples) < 3:
                    samples.append(f"{status}: {payload[:300]!r}")
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=worker, daemon=True)
               for _ in range(int(spec.get("threads", 4)))]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=float(spec["seconds"]) + 60)
    elapsed = time.monotonic() - started
    return {"statuses": statuses, "latencies": latencies, "elapsed": elapsed,
            "samples": samples, "sent": len(latencies)}


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))))
