"""The browsable API reference at `/api/v1/docs/`: Swagger UI under the strict
Content-Security-Policy every page carries.

The UI's files come from the installed sidecar package (no CDN). Its start-up script is fetched
as a same-origin file (`?script`, drf-spectacular's split view) rather than written inline, and
the page's few rules of style are a static stylesheet, so the page needs no inline script, no
inline style and no nonce. Its one addition to the policy: the UI's stylesheet draws its icons
as `data:` SVG images, which cannot run script.
"""

from __future__ import annotations

from csp.decorators import csp_update
from django.utils.decorators import method_decorator
from drf_spectacular.views import SpectacularSwaggerSplitView


@method_decorator(csp_update({"img-src": ["data:"]}), name="dispatch")
class ApiDocsView(SpectacularSwaggerSplitView):
    template_name = "api/swagger_ui.html"
