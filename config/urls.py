from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import include, path

from console.login import ThrottledLoginView

urlpatterns = [
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("console/", include("console.urls")),
    path("api/v1/", include("dispatch.api.urls")),
]
