"""Top-level URLs: the HTTP interfaces (api) and the pages (hud)."""

from django.contrib import admin
from django.urls import include, path

from hud import delivery_views

urlpatterns = [
    path("django-admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("api.urls")),
    path("crcr/delivery/<str:delivery_id>", delivery_views.delivery_page, name="crcr-delivery"),
    path("", include("hud.admin_urls")),
    path("", include("hud.urls")),
]
