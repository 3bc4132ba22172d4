"""A spend cap (docs/design.md#approval-policies): the rule the tests deploy, for this process
and for a child's environment."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

#: At most 50,000.00 EUR of `payments.transfer` a day, summed over the whole tenant.
TENANT_CAP = [{"operation": "payments.transfer", "when": {"currency": {"eq": "EUR"}},
               "cap": {"argument": "amount", "sum": "50000.00", "per": "day",
                       "scope": "tenant"}}]
TENANT_CAP_ENV = {"APPROVAL_RULES": json.dumps(TENANT_CAP)}


def deploy(settings: Any, rules: list[Any]) -> None:
    """Build the runtime with `rules` deployed."""
    from dispatch.runtime import get_runtime

    settings.APPROVAL_RULES = rules
    get_runtime.cache_clear()


@pytest.fixture
def tenant_cap(settings: Any) -> Iterator[None]:
    deploy(settings, TENANT_CAP)
    yield
    deploy(settings, [])


def second_agent(name: str = "payer2") -> Any:
    """Another agent of the world's tenant, allowed to pay from acct-001."""
    from datetime import UTC, datetime, timedelta

    from dispatch.services.authority import grant_issue
    from dispatch.services.principals import agent_create
    from tests.conftest import ALL_TOOLS

    agent, _ = agent_create(name=name, tenant="acme", tools=ALL_TOOLS)
    grant_issue(issuer="admin", subject=agent, operations=["payments.transfer"],
                scope={"account": ["acct-001"]}, now=datetime.now(UTC) - timedelta(minutes=1))
    return agent
