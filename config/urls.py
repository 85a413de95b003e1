"""Top-level URLs: the HTTP interfaces (api) and the pages (hud)."""

from django.contrib import admin
from django.urls import include, path

from api.metrics import metrics_view
from hud import accounts
from hud.web import converters

converters.register()

urlpatterns = [
    path("django-admin/", admin.site.urls),
    # Django's login/logout (names `login`, `logout`) first: password sign-in keeps its page,
    # throttled by allauth's failed-login rate limit.
    path("accounts/login/", accounts.SignInView.as_view(), name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    # allauth's GitHub views, with the URLs taken from settings at request time (hud.accounts).
    path("accounts/github/login/", accounts.github_login, name="github_login"),
    path("accounts/github/login/callback/", accounts.github_callback, name="github_callback"),
    path("accounts/", include("allauth.urls")),
    path("", include("api.urls")),
    path("metrics", metrics_view, name="metrics-prometheus"),
    path("", include("hud.web.urls")),
]
