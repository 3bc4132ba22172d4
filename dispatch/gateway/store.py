"""The gateway's way into the store from its event loop: Django's ORM is synchronous, so every
read and write runs through `in_thread`, and waiting is asynchronous polling between them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from dispatch.models import Principal
from dispatch.services.principals import token_authenticate

T = TypeVar("T")

#: The longest token looked at (as the REST API's `BearerAuthentication`).
MAX_TOKEN_LENGTH = 200


async def in_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run a synchronous store call off the event loop, with Django's connection hygiene (a
    gateway runs for days: a connection the database dropped is replaced, not reused)."""
    def run() -> T:
        close_old_connections()
        return fn(*args, **kwargs)
    return await sync_to_async(run, thread_sensitive=True)()


def bearer_principal(header: str) -> Principal | None:
    """The live agent of an `Authorization: Bearer <token>` header, or None."""
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_LENGTH:
        return None
    return token_authenticate(token)
