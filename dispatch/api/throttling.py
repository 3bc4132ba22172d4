"""Per-principal request rate (one bucket per agent or human, whichever token or session),
shared by every worker process on every machine: the count lives in the database
(`dispatch.services.rates`), not in a process's memory.

docs/design.md#denials has no code for this: a throttled call answers 429 `budget_exhausted` with
`details.reason` "rate limit" and a `Retry-After` header (see `dispatch.api.exceptions`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from dispatch.api.authentication import ApiUser
from dispatch.services.rates import rate_take

if TYPE_CHECKING:
    # Not at run time: rest_framework.views imports this module (DEFAULT_THROTTLE_CLASSES).
    from rest_framework.views import APIView


class PrincipalRateThrottle(SimpleRateThrottle):
    scope = "principal"
    waiting: float | None = None

    def get_rate(self) -> str | None:
        # Read at every request, so that settings overrides (tests) take effect.
        rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
        return rate  # type: ignore[return-value]  # drf-stubs: a number; DRF's is "600/minute"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        user: object = request.user  # an ApiUser, not the stubs' User | AnonymousUser
        if not isinstance(user, ApiUser):
            return None  # anonymous calls are refused before throttling matters
        return f"{self.scope}:{user.principal.pk}"

    def allow_request(self, request: Request, view: APIView) -> bool:
        key = self.get_cache_key(request, view)
        limit, seconds = self.parse_rate(self.rate)
        if key is None or limit is None or seconds is None:
            return True
        self.waiting = rate_take(key=key, limit=limit, seconds=seconds, now=self.timer())
        return self.waiting is None

    def wait(self) -> float | None:
        return self.waiting
