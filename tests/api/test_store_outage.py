"""A store or broker outage answers 503 `persistence_failure` (docs/design.md#denials), never 500
`internal_error`: the database refusing every statement of a request (its server gone, the
connection closed under it), or the broker refusing the message of a dispatch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery import current_app
from django.db import DatabaseError, InterfaceError, OperationalError, connection

from tests.api.conftest import Caller, assert_error
from tests.api.test_cancel_api import granted

pytestmark = pytest.mark.django_db

OUTAGES = [OperationalError("server closed the connection unexpectedly"),
           InterfaceError("connection already closed"),
           DatabaseError("database disk image is malformed")]


@pytest.mark.parametrize("outage", OUTAGES, ids=lambda e: type(e).__name__)
def test_a_store_that_fails_under_a_request_is_persistence_failure(
    owner: Caller, outage: Exception,
) -> None:
    def fail(*_: Any) -> None:
        raise outage

    with connection.execute_wrapper(fail):
        read = owner.get("grants/")
        write = owner.post("resources/", {"kind": "email_draft", "payload": {}})
    assert_error(read, 503, "persistence_failure")
    assert_error(write, 503, "persistence_failure")


@pytest.fixture
def dead_broker() -> Iterator[None]:
    """The app publishes to a broker nobody listens on, from fresh connections."""
    previous = current_app.conf.broker_url
    options = current_app.conf.broker_transport_options  # the filesystem broker's folders
    current_app.conf.broker_url = "redis://127.0.0.1:1/0"
    current_app.conf.broker_transport_options = {"max_retries": 0}
    current_app._pool = None
    current_app.amqp._producer_pool = None
    try:
        yield
    finally:
        current_app.conf.broker_url = previous
        current_app.conf.broker_transport_options = options
        current_app._pool = None
        current_app.amqp._producer_pool = None


@pytest.mark.django_db(transaction=True)  # the message is published when the claim commits
def test_a_broker_that_refuses_a_dispatch_is_persistence_failure(
    owner: Caller, caller: Callable[[str | None], Caller], dead_broker: None,
) -> None:
    proposal = granted(owner, caller)
    assert_error(owner.post(f"proposals/{proposal['id']}/dispatch/", {}), 503,
                 "persistence_failure")
