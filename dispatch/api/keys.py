"""`GET /api/v1/keys/`: the deployment's public signing keys as a JWKS (docs/audit-seal.md#keys).
Public: no token needed, as anyone verifying an export or a permit needs them."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from dispatch.api.base import ApiView
from dispatch.signing import jwks


@extend_schema(exclude=True)
class KeysApi(ApiView):
    authentication_classes: list[Any] = []  # noqa: RUF012 (DRF's own attribute)
    permission_classes = [AllowAny]  # noqa: RUF012

    def get(self, request: Request) -> Response:
        return Response(jwks())
