"""API test helpers: a caller per principal over Django's test client, and the error shape."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client

from exact_console import Client as ConsoleClient
from tests.conftest import World
from tests.support.destinations import Destinations

API = "/api/v1/"


@dataclass
class Caller:
    """One principal calling the API in-process with its bearer token."""

    client: Client
    token: str | None

    def _headers(self) -> dict[str, str]:
        return {"HTTP_AUTHORIZATION": f"Bearer {self.token}"} if self.token else {}

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get(API + path, params, **self._headers())

    def post(self, path: str, body: Any = None, *, raw: bytes | str | None = None,
             content_type: str = "application/json") -> Any:
        data = raw if raw is not None else json.dumps({} if body is None else body)
        return self.client.post(API + path, data=data, content_type=content_type,
                                **self._headers())

    def call(self, method: str, path: str, body: Any = None) -> Any:
        if method == "GET":
            return self.get(path)
        return self.post(path, body)


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    """The exact error body of docs/design.md#denials; returns its `details`."""
    assert response.status_code == status, (response.status_code, response.content)
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    return dict(body["error"]["details"])


def schema_errors(response: Any) -> list[dict[str, str]]:
    details = assert_error(response, 422, "schema_invalid")
    errors = details["errors"]
    assert errors
    for error in errors:
        assert set(error) == {"pointer", "message"}, error
    return list(errors)


@dataclass
class Tokens:
    owner: str
    approver: str
    admin: str
    outsider: str
    outsider_operator: str
    outsider_admin: str


@pytest.fixture
def tokens(world: World) -> Tokens:
    from dispatch.services.principals import human_create, token_issue

    _, outsider_admin = human_create(name="outsider-admin", tenant="globex", role="admin",
                                     password="pw")
    return Tokens(
        owner=world.owner_token,
        approver=token_issue(principal=world.approver),
        admin=token_issue(principal=world.admin),
        outsider=token_issue(principal=world.outsider),
        outsider_operator=token_issue(principal=world.outsider_operator),
        outsider_admin=outsider_admin,
    )


@pytest.fixture
def caller(tokens: Tokens) -> Callable[[str | None], Caller]:
    def make(who: str | None) -> Caller:
        return Caller(Client(), None if who is None else getattr(tokens, who))

    return make


@pytest.fixture
def owner(caller: Callable[[str | None], Caller]) -> Caller:
    return caller("owner")


@pytest.fixture
def eager(settings: Any) -> None:
    """Run the dispatch task in-process on commit, as a worker would after the claim."""
    settings.CELERY_TASK_ALWAYS_EAGER = True


def draft_payload(**overrides: Any) -> dict[str, Any]:
    payload = {"from": "support@acme.example", "to": ["customer@example.com"],
               "subject": "Your refund", "body": "We have refunded your order."}
    payload.update(overrides)
    return payload


@pytest.fixture
def agent(destinations: Destinations, live_server: Any, world: World,
          eager: None) -> Iterator[ConsoleClient]:
    """The owner's agent over HTTP with the Python client, against the live server; the
    dispatch runs eagerly."""
    # `destinations` first: the world's proposals bind the running destinations.
    with ConsoleClient(live_server.url, world.owner_token, timeout=60) as client:
        yield client


@pytest.fixture
def narrow_agent(agent: ConsoleClient, world: World, live_server: Any) -> Iterator[ConsoleClient]:
    """Another agent of the owner's tenant over HTTP, whose tool set leaves out
    `payments.transfer`: its framework tools leave it out too."""
    from dispatch.services.principals import agent_create

    _, token = agent_create(name="narrow", tenant="acme", tools=["email.send", "crm.lookup"])
    with ConsoleClient(live_server.url, token, timeout=60) as client:
        yield client


#: The arguments of a `payments.transfer` the owner's grant would cover.
TRANSFER = {"from_account": "acct-001", "to_account": "acct-999", "amount": "10.00",
            "currency": "EUR"}


def draft_arguments(agent: ConsoleClient) -> dict[str, Any]:
    """The arguments of `email.send` for a draft the agent makes first."""
    draft = agent.create_resource("email_draft", draft_payload())
    return {"draft": {"id": draft["id"], "revision": 1}}
