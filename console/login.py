"""The login page, throttled per account and per client address.

Each failed login is remembered for `LOGIN_FAILURE_WINDOW` seconds twice: against the account
(its username, case-folded) and against the client's address. An account with
`LOGIN_FAILURES_PER_ACCOUNT` failures in the window, or an address with
`LOGIN_FAILURES_PER_ADDRESS`, answers 429 until the oldest of them ages out, and the password is
not even checked. A success forgets its own account's failures, never another's, and not the
address's (else one valid login would reset a guesser's count).

The record lives in the `shared` cache, one store for every worker. Each failure is one cache
entry, a numbered slot of its bucket, taken with `add`: an INSERT on the database cache, SET NX
on Redis, so exactly one of two concurrent attempts gets a slot, and a burst of parallel guesses
cannot slip past the limit as a read-then-increment counter would let it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm, UsernameField
from django.contrib.auth.views import LoginView
from django.core.cache import caches
from django.http import HttpRequest, HttpResponse


@dataclass(frozen=True)
class Bucket:
    """The failures of one account or one address: slot keys `<name>:0` … `<name>:<limit-1>`."""

    name: str
    limit: int

    @property
    def slots(self) -> list[str]:
        return [f"{self.name}:{n}" for n in range(self.limit)]


@dataclass(frozen=True)
class Attempt:
    """The slots one login attempt took; they stay taken if it fails."""

    account: Bucket
    account_slot: str
    address_slot: str


def client_address(request: HttpRequest) -> str:
    header = settings.LOGIN_ADDRESS_HEADER
    if header:
        # The entry the nearest proxy added: the ones before it are the client's to forge.
        forwarded: str = request.META.get("HTTP_" + header.upper().replace("-", "_"), "")
        nearest = forwarded.rsplit(",", 1)[-1].strip()
        if nearest:
            return nearest
    return str(request.META.get("REMOTE_ADDR", ""))


def bucket(kind: str, value: str, limit: int) -> Bucket:
    # Hashed: any username fits a cache key, and none is stored in the clear.
    return Bucket(f"login:{kind}:{hashlib.sha256(value.encode()).hexdigest()}", limit)


def _take(of: Bucket) -> str | None:
    """A free slot of the bucket, now taken for the window; None when every slot is taken."""
    cache = caches["shared"]
    taken = cache.get_many(of.slots)
    for slot in of.slots:
        # `add` fails if a concurrent attempt took this slot first: try the next one.
        if slot not in taken and cache.add(slot, 1, timeout=settings.LOGIN_FAILURE_WINDOW):
            return slot
    return None


def attempt_begin(request: HttpRequest, username: str) -> Attempt | None:
    """Take a slot in the account's and in the address's bucket; None if either is full."""
    account = bucket("account", username.casefold(), settings.LOGIN_FAILURES_PER_ACCOUNT)
    address = bucket("address", client_address(request), settings.LOGIN_FAILURES_PER_ADDRESS)
    account_slot = _take(account)
    if account_slot is None:
        return None
    address_slot = _take(address)
    if address_slot is None:
        caches["shared"].delete(account_slot)
        return None
    return Attempt(account, account_slot, address_slot)


def attempt_succeeded(attempt: Attempt) -> None:
    """Not a failure: give the address its slot back and forget the account's failures."""
    caches["shared"].delete_many([*attempt.account.slots, attempt.address_slot])


class ThrottledLoginView(LoginView):
    attempt: Attempt | None = None

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        # The name as the form will read it (stripped, NFKC): "approver " is "approver".
        # Never None: a CharField's empty value is "" (the stubs allow None for any field).
        username: str = UsernameField().to_python(request.POST.get("username", "")) or ""
        self.attempt = attempt_begin(request, username)
        if self.attempt is None:
            return self.locked_out()
        return super().post(request, *args, **kwargs)

    def form_valid(self, form: AuthenticationForm) -> HttpResponse:
        if self.attempt is not None:
            attempt_succeeded(self.attempt)
        return super().form_valid(form)

    def locked_out(self) -> HttpResponse:
        window = settings.LOGIN_FAILURE_WINDOW
        minutes = max(1, window // 60)
        form = self.get_form_class()(self.request)  # unbound: the password is not checked
        context = self.get_context_data(form=form, locked_out=(
            "Too many failed logins for this account or from this address. "
            f"Wait {minutes} minute{'s' if minutes != 1 else ''} and try again."))
        response = self.render_to_response(context, status=429)
        response["Retry-After"] = str(window)
        return response
