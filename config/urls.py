"""Top-level URLs: the HTTP interfaces (api) and the pages (hud)."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("django-admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("api.urls")),
    path("", include("hud.urls")),
]
