"""Four eyes (docs/design.md#approval-policies): the rule the tests deploy, and the second
operator who makes a quorum of two possible."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

#: `payments.transfer` of 10,000.00 EUR or more needs two operators (and, since no rule names
#: another currency, so does any amount in another).
FOUR_EYES = [{"operation": "payments.transfer",
              "when": {"amount": {"gte": "10000.00"}, "currency": {"eq": "EUR"}}, "quorum": 2}]
#: For a child process's environment.
FOUR_EYES_ENV = {"APPROVAL_RULES": json.dumps(FOUR_EYES)}


@pytest.fixture
def four_eyes(settings: Any) -> Iterator[None]:
    """The runtime is built with FOUR_EYES deployed (and rebuilt without it after)."""
    from dispatch.runtime import get_runtime

    settings.APPROVAL_RULES = FOUR_EYES
    get_runtime.cache_clear()
    yield
    settings.APPROVAL_RULES = []
    get_runtime.cache_clear()


def second_operator(name: str = "approver2") -> Any:
    from dispatch.services.principals import human_create

    operator, _ = human_create(name=name, tenant="acme", role="operator", password="pw")
    return operator
