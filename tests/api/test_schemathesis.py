"""Property-based fuzzing of the served OpenAPI schema (schemathesis, in-process WSGI).

Every operation gets a bounded number of generated requests, valid and invalid by the schema,
sent with an agent's bearer token. No answer may be a 5xx, and every answer must be one the
schema documents, in the documented shape and content type. Invalid requests must be refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import World

pytestmark = pytest.mark.django_db

#: Examples per operation and generation mode; 13 operations stay well under a minute.
EXAMPLES = 30
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, response_headers_conformance, negative_data_rejection,
          ignored_auth]


@contextmanager
def connections_kept() -> Iterator[None]:
    """As Django's test client does: a request must not close the test's connection (and with
    it the transaction each test runs in)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture(autouse=True)
def _keep_connections() -> Iterator[None]:
    with connections_kept():
        yield


def _served_schema() -> Any:
    # Loaded once, at collection, from the schema endpoint the server itself serves.
    from config.wsgi import application

    with connections_kept():
        return schemathesis.openapi.from_wsgi("/api/v1/schema/?format=json", application)


schema = _served_schema()


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_every_answer_is_documented_and_no_5xx(case: Any, world: World) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {world.owner_token}"},
                           checks=CHECKS)
