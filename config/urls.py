from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from console.login import ThrottledLoginView


class FaviconView(RedirectView):
    """Browsers ask for /favicon.ico whatever a page's `<link rel="icon">` says; the icon is a
    static file, its URL read from the storage at request time (a manifest may hash it)."""

    permanent = True

    def get_redirect_url(self, *args: Any, **kwargs: Any) -> str:
        return static("console/favicon.svg")


handler404 = "config.errors.page_not_found"
handler500 = "config.errors.server_error"

urlpatterns = [
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("console/", include("console.urls")),
    path("api/v1/", include("dispatch.api.urls")),
    path("favicon.ico", FaviconView.as_view()),
]
