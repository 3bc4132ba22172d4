"""The per-principal rate is one for every worker process (docs/design.md#denials): real
gunicorn with three workers, 40 parallel calls of one agent at 10 a minute; at most 10 get
through, whichever worker serves them, and every other call is the API's 429."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.conftest import World
from tests.support.processes import child_env
from tests.support.web import WebServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CALLS = 40
LIMIT = 10


def test_forty_calls_across_three_workers_let_ten_through(world: World, tmp_path: Path) -> None:
    # A server hook of gunicorn's writes which worker (its pid) served each call.
    served_log, conf = tmp_path / "served.log", tmp_path / "gunicorn.conf.py"
    conf.write_text(
        "def post_request(worker, req, environ, resp):\n"
        f"    with open({str(served_log)!r}, 'a') as log:\n"
        "        log.write(f'{worker.pid} {resp.status_code}\\n')\n")
    web = WebServer(env=child_env(API_RATE_PER_PRINCIPAL=f"{LIMIT}/minute"),
                    log=tmp_path / "web.log", workers=3, args=["--config", str(conf)])
    web.start()
    try:
        def call(_: int) -> httpx.Response:
            # A connection of its own per call, so that the calls spread over the workers.
            with httpx.Client(base_url=web.url, timeout=60) as client:
                return client.get("/api/v1/contracts/",
                                  headers={"Authorization": f"Bearer {world.owner_token}"})

        with ThreadPoolExecutor(max_workers=12) as pool:
            answers = list(pool.map(call, range(CALLS)))
    finally:
        web.stop()
    allowed = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code != 200]
    assert 0 < len(allowed) <= LIMIT, [a.status_code for a in answers]
    for answer in refused:
        assert answer.status_code == 429, answer.text
        error = answer.json()["error"]
        assert (error["code"], error["details"]["reason"]) == ("budget_exhausted", "rate limit")
        assert int(answer.headers["Retry-After"]) >= 1
    # More than one worker served them: the limit held across processes, not within one.
    served = [line.split() for line in served_log.read_text().splitlines() if line.strip()]
    assert len(served) == CALLS
    assert len({pid for pid, _ in served}) > 1, served
