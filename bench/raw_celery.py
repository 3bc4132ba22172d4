"""A throwaway Celery app with one empty task: the raw broker round trip the approval latency
is compared with. Same broker, same acknowledgement and prefetch settings as the project's app.

Worker: `celery -A bench.raw_celery worker -Q $BENCH_RAW_QUEUE` with `BENCH_BROKER` set.
"""

from __future__ import annotations

import os
import time

from celery import Celery

BROKER = os.environ.get("BENCH_BROKER", "redis://127.0.0.1:6379/14")

# Never the current app: the project's shared tasks must keep publishing through its own app.
app = Celery("bench_raw", broker=BROKER, backend=BROKER, set_as_current=False)
app.conf.update(
    task_default_queue=os.environ.get("BENCH_RAW_QUEUE", "bench-raw"),
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    broker_transport_options={"visibility_timeout": 60},
    result_expires=600,
    broker_connection_retry_on_startup=True,
)


@app.task(name="bench.raw.empty")
def empty() -> float:
    """Does nothing but say when it started (wall clock, same machine)."""
    return time.time()
