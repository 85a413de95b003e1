"""Password sign-in (the local login page and Django admin's) under allauth's rate limits.

allauth throttles failed sign-ins through its account adapter (`login_failed`: per IP and per
login, ACCOUNT_RATE_LIMITS); these forms authenticate through that adapter, so every
password form of the site shares one throttle and one "too many attempts" message.
"""

from collections.abc import Callable
from functools import wraps
from typing import Any

from allauth.account.adapter import get_adapter
from allauth.socialaccount.adapter import get_adapter as get_social_adapter
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


class ThrottledSignIn:
    """`clean` of Django's authentication forms, authenticating through allauth's adapter."""

    def clean(self) -> dict[str, Any]:
        """Refuse once the rate limit is spent, else authenticate as Django's form does."""
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username is not None and password:
            # Raises a ValidationError ("too many failed login attempts") when throttled.
            self.user_cache = get_adapter(self.request).authenticate(
                self.request, username=username, password=password
            )
            if self.user_cache is None:
                raise self.get_invalid_login_error()
            self.confirm_login_allowed(self.user_cache)
        return self.cleaned_data


class SignInForm(ThrottledSignIn, AuthenticationForm):
    """The local sign-in page's form."""


class AdminSignInForm(ThrottledSignIn, AdminAuthenticationForm):
    """Django admin's sign-in form (staff only, as Django's)."""


def when_github_configured(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """`view`, or a page saying GitHub sign-in is not configured (allauth would answer 500)."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if get_social_adapter().list_apps(request, provider="github"):
            return view(request, *args, **kwargs)
        message = (
            "Sign-in with GitHub is not configured on this server (no GitHub OAuth App: "
            "GITHUB_OAUTH_CLIENT_ID is unset); sign in with a password instead."
        )
        return render(request, "404.html", {"message": message}, status=404)

    return wrapper
