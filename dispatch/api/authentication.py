"""Who is calling (docs/rest-api.md#calls): a bearer token, or a human's Django session with CSRF
enforced.

Both authenticators put an `ApiUser` in `request.user`; views read the principal from it.
A bearer header that is present but not a live token fails closed (401 `unauthenticated`):
it never falls back to the session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.request import Request

from dispatch.models import Principal
from dispatch.observability.context import bind_ids
from dispatch.services.principals import principal_for_user, token_authenticate
from protocols.denials import Denial, DenialCode

BEARER = "bearer"
#: Longest header value looked at; real tokens are about 70 characters.
MAX_TOKEN_LENGTH = 200


@dataclass(frozen=True)
class ApiUser:
    """The authenticated caller as DRF sees it: a principal, agent or human."""

    principal: Principal
    via: str  # "token" or "session"

    is_authenticated = True
    is_anonymous = False

    @property
    def pk(self) -> str:
        return self.principal.pk

    def __str__(self) -> str:
        return self.principal.name


def principal_of(request: Request) -> Principal:
    """The principal of an authenticated request (views run behind `IsAuthenticated`)."""
    # Whatever the authenticator put there: our own ApiUser, not the User | AnonymousUser
    # of the stubs (which cannot be narrowed to it).
    user: object = request.user
    if not isinstance(user, ApiUser):  # unreachable behind IsAuthenticated: a backstop
        raise Denial(DenialCode.UNAUTHENTICATED)
    return user.principal


class BearerAuthentication(BaseAuthentication):
    """`Authorization: Bearer <token>`, checked by `token_authenticate` (constant-time)."""

    def authenticate(self, request: Request) -> tuple[ApiUser, None] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != BEARER or not token or len(token) > MAX_TOKEN_LENGTH:
            raise Denial(DenialCode.UNAUTHENTICATED, reason="expected 'Bearer <token>'")
        principal = token_authenticate(token)
        if principal is None:
            raise Denial(DenialCode.UNAUTHENTICATED, reason="unknown or revoked token")
        bind_ids(tenant=principal.tenant_id, principal=principal.id)  # on its log lines
        return ApiUser(principal=principal, via="token"), None

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (not 403) to anonymous calls.
        return 'Bearer realm="api"'


class PrincipalSessionAuthentication(SessionAuthentication):
    """A logged-in human with a principal; CSRF is enforced on unsafe methods."""

    def authenticate(self, request: Request) -> tuple[ApiUser, None] | None:
        user: Any = getattr(request._request, "user", None)  # as DRF's own does
        if not user or not user.is_active:
            return None
        principal = principal_for_user(user)
        if principal is None:
            return None
        self.enforce_csrf(request)
        bind_ids(tenant=principal.tenant_id, principal=principal.id)
        return ApiUser(principal=principal, via="session"), None

    def enforce_csrf(self, request: Request) -> None:
        try:
            super().enforce_csrf(request)
        except exceptions.PermissionDenied as exc:  # DRF's "CSRF Failed: ..."
            # A session without its CSRF token is not proof of who is calling.
            raise Denial(DenialCode.UNAUTHENTICATED,
                         "The session's CSRF token is missing or wrong; send the "
                         "X-CSRFToken header, or use a bearer token.",
                         reason=str(exc.detail)) from None
