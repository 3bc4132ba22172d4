"""A strict Content-Security-Policy for every console page.

No inline script or style, no eval, no third-party origin: scripts, styles and XHR (htmx
polling) come from this origin only, forms post only here, and no page may be framed.
`console.csp.ContentSecurityPolicyMiddleware`, installed in `config.settings.MIDDLEWARE`,
covers every response (console views, login and logout pages, errors).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponseBase
from django.utils.deprecation import MiddlewareMixin

POLICY = "; ".join([
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self'",
    "font-src 'self'",
    "connect-src 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
])


class ContentSecurityPolicyMiddleware(MiddlewareMixin):
    """Adds the policy to a response that does not already set one."""

    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        if "Content-Security-Policy" not in response.headers:
            response.headers["Content-Security-Policy"] = POLICY
        return response

