"""Console fixtures: CSRF-enforcing clients logged in as the world's people."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from tests.conftest import World, make_world

CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


class Browser:
    """A Django test client that enforces CSRF and posts forms with the token a page gave."""

    def __init__(self) -> None:
        self.client = Client(enforce_csrf_checks=True)
        self.token = ""

    def login(self, username: str, password: str) -> None:
        page = self.client.get("/accounts/login/")
        response = self.client.post("/accounts/login/", {
            "username": username, "password": password,
            "csrfmiddlewaretoken": self._token_of(page)})
        assert response.status_code == 302, "login failed"

    def get(self, url: str, **extra: Any) -> Any:
        response = self.client.get(url, **extra)
        found = CSRF_INPUT.search(response.content.decode())
        if found:
            self.token = found.group(1)
        return response

    def post(self, url: str, data: dict[str, Any], *, csrf: bool = True) -> Any:
        payload = dict(data)
        if csrf:
            payload["csrfmiddlewaretoken"] = self.token or self.client.cookies["csrftoken"].value
        return self.client.post(url, payload)

    @staticmethod
    def _token_of(response: Any) -> str:
        found = CSRF_INPUT.search(response.content.decode())
        assert found, "the page has no CSRF token"
        return found.group(1)


@pytest.fixture
def as_user(db: None) -> Callable[[str, str], Browser]:
    def login(username: str, password: str) -> Browser:
        browser = Browser()
        browser.login(username, password)
        return browser
    return login


@pytest.fixture
def operator(world: World, as_user: Callable[[str, str], Browser]) -> Browser:
    return as_user("approver", "approver-pw")


@pytest.fixture
def admin(world: World, as_user: Callable[[str, str], Browser]) -> Browser:
    return as_user("admin", "admin-pw")


@pytest.fixture
def past_world(db: None, now: datetime) -> World:
    """A world whose clock stood two hours ago: its approvals (one hour) have lapsed."""
    return make_world(now - timedelta(hours=2), prefix="past-")


def text(response: Any) -> str:
    return response.content.decode()
