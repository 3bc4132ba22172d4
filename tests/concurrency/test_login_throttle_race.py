"""Concurrent failed logins cannot slip past the limit: each takes its own slot with `add` (an
INSERT into the database cache table, SET NX on Redis), so exactly the limit's worth succeed.
Threads, each with its own database connection (SQLite locks the file, PostgreSQL the row)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.cache import caches
from django.db import connection
from django.test import RequestFactory

from console.login import attempt_begin, bucket
from tests.support.workers import require_redis

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 12
ADDRESSES = [f"10.9.0.{n}" for n in range(THREADS)]


@pytest.fixture(params=["database", "redis"])
def account(request: Any, settings: Any) -> Iterator[str]:
    """A fresh account name, its failures kept in the shared cache of either backend."""
    if request.param == "redis":
        settings.CACHES = {**settings.CACHES, "shared": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": require_redis(), "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}}
    assert type(caches["shared"]).__name__ == {"database": "DatabaseCache",
                                                "redis": "RedisCache"}[request.param]
    name = f"raced-{uuid.uuid4().hex}"
    yield name
    # Neither a transactional test's flush nor Redis forgets these: delete them.
    buckets = [bucket("account", name, settings.LOGIN_FAILURES_PER_ACCOUNT),
               *(bucket("address", a, settings.LOGIN_FAILURES_PER_ADDRESS) for a in ADDRESSES)]
    caches["shared"].delete_many([slot for bucket in buckets for slot in bucket.slots])


def test_concurrent_attempts_take_at_most_the_limit(account: str) -> None:
    barrier = threading.Barrier(THREADS)
    taken: list[bool] = []
    lock = threading.Lock()

    def race(address: str) -> None:
        request = RequestFactory().post("/accounts/login/", REMOTE_ADDR=address)
        try:
            barrier.wait(timeout=30)
            attempt = attempt_begin(request, account)
            with lock:
                taken.append(attempt is not None)
        finally:
            connection.close()

    threads = [threading.Thread(target=race, args=(address,)) for address in ADDRESSES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(taken) == THREADS
    assert taken.count(True) == settings.LOGIN_FAILURES_PER_ACCOUNT
