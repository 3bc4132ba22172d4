"""Per-principal request rate (one bucket per agent or human, whichever token or session).

DESIGN §6 has no code for this: a throttled call answers 429 `budget_exhausted` with
`details.reason` "rate limit" and a `Retry-After` header (see `dispatch.api.exceptions`).
"""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from dispatch.api.authentication import ApiUser


class PrincipalRateThrottle(SimpleRateThrottle):
    scope = "principal"

    def get_rate(self) -> str | None:
        # Read at every request, so that settings overrides (tests) take effect.
        rates: dict[str, str | None] = api_settings.DEFAULT_THROTTLE_RATES
        return rates.get(self.scope)

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        user = request.user
        if not isinstance(user, ApiUser):
            return None  # anonymous calls are refused before throttling matters
        return self.cache_format % {"scope": self.scope, "ident": user.principal.pk}
