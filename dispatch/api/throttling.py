"""Per-principal request rate (one bucket per agent or human, whichever token or session).

docs/design.md#denials has no code for this: a throttled call answers 429 `budget_exhausted` with
`details.reason` "rate limit" and a `Retry-After` header (see `dispatch.api.exceptions`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from dispatch.api.authentication import ApiUser

if TYPE_CHECKING:
    # Not at run time: rest_framework.views imports this module (DEFAULT_THROTTLE_CLASSES).
    from rest_framework.views import APIView


class PrincipalRateThrottle(SimpleRateThrottle):
    scope = "principal"

    def get_rate(self) -> str | None:
        # Read at every request, so that settings overrides (tests) take effect.
        rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
        return rate  # type: ignore[return-value]  # drf-stubs: a number; DRF's is "600/minute"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        user: object = request.user  # an ApiUser, not the stubs' User | AnonymousUser
        if not isinstance(user, ApiUser):
            return None  # anonymous calls are refused before throttling matters
        return self.cache_format % {"scope": self.scope, "ident": user.principal.pk}
