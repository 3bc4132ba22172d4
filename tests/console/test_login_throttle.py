"""Failed logins are throttled per account and per client address, in a cache every worker
shares (the database cache table by default): a locked account or address answers 429 without
the password being checked, and a success resets its own account only."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import pytest
from django.conf import settings
from django.core.cache import caches
from django.db import connection
from django.test import Client

from tests.conftest import World

pytestmark = pytest.mark.django_db

LOCKED = "Too many failed logins for this account or from this address."


def attempt(client: Client, username: str, password: str, address: str) -> Any:
    return client.post("/accounts/login/", {"username": username, "password": password},
                       REMOTE_ADDR=address)


def assert_refused(response: Any) -> None:
    """A wrong password: the form again, no session."""
    assert response.status_code == 200
    assert "Please enter a correct username and password." in response.content.decode()
    assert "_auth_user_id" not in response.wsgi_request.session


def assert_locked(response: Any) -> None:
    assert response.status_code == 429
    assert LOCKED in response.content.decode()
    assert int(response["Retry-After"]) == settings.LOGIN_FAILURE_WINDOW
    assert "_auth_user_id" not in response.wsgi_request.session


def test_five_failures_lock_the_account_from_every_address(world: World) -> None:
    first, second = Client(), Client()
    for _ in range(5):
        assert_refused(attempt(first, "approver", "wrong", "10.0.0.1"))
    # Another client at another address, with the right password: still locked.
    assert_locked(attempt(second, "approver", "approver-pw", "10.0.0.2"))
    assert_locked(attempt(first, "approver", "approver-pw", "10.0.0.1"))
    # Other accounts are not affected, from either address.
    assert attempt(second, "admin", "admin-pw", "10.0.0.2").status_code == 302
    assert attempt(Client(), "admin", "admin-pw", "10.0.0.1").status_code == 302


def test_twenty_failures_lock_the_address_for_every_account(world: World) -> None:
    guesser = Client()
    for n in range(20):
        assert_refused(attempt(guesser, f"nobody-{n}", "wrong", "10.0.0.3"))
    assert_locked(attempt(guesser, "approver", "approver-pw", "10.0.0.3"))
    # The same account from another address logs in: the address was locked, not the account.
    assert attempt(Client(), "approver", "approver-pw", "10.0.0.4").status_code == 302


def test_a_success_resets_its_own_account_only(world: World) -> None:
    client = Client()
    for _ in range(4):
        assert_refused(attempt(client, "approver", "wrong", "10.0.0.5"))
        assert_refused(attempt(client, "admin", "wrong", "10.0.0.6"))
    assert attempt(Client(), "admin", "admin-pw", "10.0.0.6").status_code == 302
    # approver's four failures still count: a fifth is allowed, a sixth attempt is locked out.
    assert_refused(attempt(client, "approver", "wrong", "10.0.0.7"))
    assert_locked(attempt(client, "approver", "approver-pw", "10.0.0.7"))
    # admin starts again: five more failures before the lock.
    for _ in range(5):
        assert_refused(attempt(client, "admin", "wrong", "10.0.0.6"))
    assert_locked(attempt(client, "admin", "admin-pw", "10.0.0.6"))


def test_successes_do_not_use_up_the_address(world: World) -> None:
    for _ in range(25):
        assert attempt(Client(), "admin", "admin-pw", "10.0.0.8").status_code == 302


def test_spellings_of_one_username_share_a_bucket(world: World) -> None:
    client = Client()
    # The form strips and NFKC-normalizes the name; the bucket also ignores case.
    for name in ["approver", "Approver", " APPROVER", "approver ", "ａｐｐｒｏｖｅｒ"]:
        assert_refused(attempt(client, name, "wrong", "10.0.0.9"))
    assert_locked(attempt(client, "approver", "approver-pw", "10.0.0.10"))


def test_failures_are_kept_in_the_database_cache_every_worker_reads(world: World) -> None:
    shared = settings.CACHES["shared"]
    assert shared["BACKEND"] == "django.core.cache.backends.db.DatabaseCache"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {connection.ops.quote_name(shared['LOCATION'])}")
        before = cursor.fetchone()[0]
    assert_refused(attempt(Client(), "approver", "wrong", "10.0.0.11"))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {connection.ops.quote_name(shared['LOCATION'])}")
        # One row for the account's failure, one for the address's.
        assert cursor.fetchone()[0] == before + 2
    # The per-process cache (DRF's rate limit) holds none of it: clearing it changes nothing.
    caches["default"].clear()
    for _ in range(4):
        assert_refused(attempt(Client(), "approver", "wrong", "10.0.0.12"))
    assert_locked(attempt(Client(), "approver", "approver-pw", "10.0.0.13"))


def test_behind_a_proxy_the_address_is_the_last_forwarded_entry(
    world: World, settings: Any,
) -> None:
    settings.LOGIN_ADDRESS_HEADER = "X-Forwarded-For"

    def via_proxy(client: Client, forwarded: str, password: str = "wrong") -> Any:
        return client.post("/accounts/login/", {"username": f"nobody-{uuid4().hex}",
                                                "password": password},
                           REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR=forwarded)

    guesser = Client()
    for n in range(20):
        # The entries before the proxy's own are the client's to write: they do not count.
        assert_refused(via_proxy(guesser, f"203.0.113.{n}, 198.51.100.7"))
    assert_locked(via_proxy(guesser, "198.51.100.7"))
    # Another client behind the same proxy is not locked out.
    response = Client().post("/accounts/login/", {"username": "admin", "password": "admin-pw"},
                             REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="198.51.100.8")
    assert response.status_code == 302
