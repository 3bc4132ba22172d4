"""The broker's answer for /readyz and the depth of the dispatch queue for /metrics: messages
waiting in `CELERY_TASK_DEFAULT_QUEUE`, read from the broker itself (Redis list lengths, or the
embedded broker's message files), never counted by the processes that publish."""

from __future__ import annotations

from typing import Any

from django.conf import settings


def queue_depth(*, timeout: float) -> int:
    """Messages waiting in the dispatch queue; raises if the broker does not answer within
    about `timeout` seconds."""
    from celery import current_app

    options: dict[str, Any] = dict(settings.CELERY_BROKER_TRANSPORT_OPTIONS)
    if settings.CELERY_BROKER_URL.startswith("redis"):
        options.update(socket_timeout=timeout, socket_connect_timeout=timeout)
    queue: str = settings.CELERY_TASK_DEFAULT_QUEUE
    with current_app.connection_for_read(connect_timeout=timeout,
                                         transport_options=options) as conn:
        conn.ensure_connection(max_retries=1, timeout=max(1, round(timeout)))
        channel: Any = conn.default_channel  # a kombu virtual channel: it counts the queue
        _, count, _ = channel.queue_declare(queue=queue, passive=False)
        return int(count)
