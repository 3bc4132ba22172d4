"""The project's error pages (`handler404`, `handler500` in config.urls).

Under `/api/` a path Django cannot route, or a failure no view handled, answers the API's own
JSON envelope, `{"error": {"code", "message", "details"}}` (docs/rest-api.md); everywhere else
the console's pages `templates/404.html` and `templates/500.html`.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from dispatch.api.exceptions import error_body
from protocols.denials import Denial, DenialCode

API_PREFIX = "/api"
#: Not a refusal of `DenialCode`: the server failed, and the request may or may not have taken
#: effect.
INTERNAL_ERROR = "internal_error"


def _is_api(request: HttpRequest) -> bool:
    path = request.path_info
    return path == API_PREFIX or path.startswith(API_PREFIX + "/")


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return JsonResponse(Denial(DenialCode.NOT_FOUND).as_body(), status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """Renders without the request's context: the database (sessions, users) may be what
    failed."""
    if _is_api(request):
        return JsonResponse(error_body(
            INTERNAL_ERROR,
            "The server failed while handling the request. It may or may not have taken "
            "effect: read the resource again before retrying.", {}), status=500)
    return defaults.server_error(request)
