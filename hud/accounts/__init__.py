"""Sign-in with GitHub (django-allauth) and the roles a GitHub login brings.

At every GitHub sign-in the user's roles follow configuration, not clicks: a login that is an
on-call of a listed (not delisted) backend maintains that backend, and a login named in
CRCR_ADMIN_LOGINS is in the `crcr-admins` group. Password sign-in (the embedded default and
demo users) goes through Django's own login view and is left alone.

allauth's GitHub adapter fixes its URLs when it is imported; the subclasses here read
CRCR_GITHUB_OAUTH_URL and CRCR_GITHUB_OAUTH_API_URL at request time, so a deployment on GitHub
Enterprise (or a test's local fake) only changes settings.
"""

import logging
from dataclasses import dataclass, field
from typing import Any

from allauth.account.adapter import DefaultAccountAdapter
from allauth.account.signals import user_logged_in
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialLogin
from allauth.socialaccount.providers.github.provider import GitHubProvider as AllauthGitHubProvider
from allauth.socialaccount.providers.github.views import GitHubOAuth2Adapter
from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView, OAuth2LoginView
from allauth.socialaccount.signals import social_account_added, social_account_updated
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, Group
from django.contrib.auth.views import LoginView
from django.db import transaction
from django.dispatch import receiver
from django.http import HttpRequest

from hud.accounts.sign_in import SignInForm, when_github_configured
from hud.levels.roles import ADMIN_GROUP
from hud.models import BackendMaintainer, Downstream
from hud.ops import demo

logger = logging.getLogger(__name__)
PROVIDER_ID = "github"


class SignInView(LoginView):
    """Password sign-in under allauth's rate limit, with the demo's sign-ins where it runs."""

    authentication_form = SignInForm

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        """The login form's context plus `demo_sign_ins` (empty outside the demo)."""
        context = super().get_context_data(**kwargs)
        context["demo_sign_ins"] = demo.sign_ins()
        return context


# --- allauth wiring -------------------------------------------------------------------------


class GitHubAdapter(GitHubOAuth2Adapter):
    """allauth's GitHub OAuth2 adapter with its URLs taken from settings at request time."""

    @property
    def web_url(self) -> str:  # type: ignore[override]
        """Where the OAuth pages live (https://github.com unless configured)."""
        return settings.CRCR_GITHUB_OAUTH_URL.rstrip("/")

    @property
    def api_url(self) -> str:  # type: ignore[override]
        """Where the user API lives (https://api.github.com unless configured)."""
        return settings.CRCR_GITHUB_OAUTH_API_URL.rstrip("/")

    @property
    def authorize_url(self) -> str:  # type: ignore[override]
        """The page GitHub asks the user to authorise on."""
        return f"{self.web_url}/login/oauth/authorize"

    @property
    def access_token_url(self) -> str:  # type: ignore[override]
        """Where the code is exchanged for a token."""
        return f"{self.web_url}/login/oauth/access_token"

    @property
    def profile_url(self) -> str:  # type: ignore[override]
        """The signed-in user's profile (login, id, name)."""
        return f"{self.api_url}/user"

    @property
    def emails_url(self) -> str:  # type: ignore[override]
        """The signed-in user's addresses."""
        return f"{self.api_url}/user/emails"


class GitHubProvider(AllauthGitHubProvider):
    """allauth's GitHub provider using `GitHubAdapter` (SOCIALACCOUNT_PROVIDERS provider_class)."""

    oauth2_adapter_class = GitHubAdapter
    # URL patterns still come from allauth's github package (config.urls overrides its views).
    package = "allauth.socialaccount.providers.github"


# Routed in config.urls ahead of allauth's own, under the same names and paths.
github_login = when_github_configured(OAuth2LoginView.adapter_view(GitHubAdapter))
github_callback = when_github_configured(OAuth2CallbackView.adapter_view(GitHubAdapter))


class AccountAdapter(DefaultAccountAdapter):
    """No self-service password accounts: people sign in with GitHub or are created by admins."""

    def is_open_for_signup(self, request: HttpRequest) -> bool:
        """Local sign-up (allauth's /accounts/signup/) is closed."""
        return False


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    """A first GitHub sign-in creates the account (roles come from `sync_roles`)."""

    def is_open_for_signup(self, request: HttpRequest, sociallogin: SocialLogin) -> bool:
        """Anyone with a GitHub account may sign in; without a role they only read."""
        return True


# --- Roles ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoleSync:
    """What one sync changed, for the log and the tests."""

    github_login: str
    maintains: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    admin: bool | None = None  # None: CRCR_ADMIN_LOGINS unset, the group was left alone


def _normalise(login: str) -> str:
    return login.strip().lstrip("@").lower()


def oncall_backends(github_login: str) -> list[Downstream]:
    """The listed backends whose on-calls include `github_login` (case-insensitive)."""
    wanted = _normalise(github_login)
    if not wanted:
        return []
    return [
        backend
        for backend in Downstream.objects.filter(delisted=False).order_by("full_name")
        if any(_normalise(str(login)) == wanted for login in backend.oncalls or [])
    ]


def admin_logins() -> set[str]:
    """CRCR_ADMIN_LOGINS, normalised."""
    return {_normalise(login) for login in settings.CRCR_ADMIN_LOGINS if _normalise(login)}


def sync_roles(user: AbstractBaseUser, github_login: str) -> RoleSync:
    """Make `user`'s maintainerships and admin membership match `github_login`'s configuration."""
    backends = oncall_backends(github_login)
    wanted_ids = {backend.id for backend in backends}
    configured_admins = admin_logins()
    with transaction.atomic():
        current = {
            row.downstream_id: row.downstream.full_name
            for row in BackendMaintainer.objects.filter(user=user).select_related("downstream")
        }
        added = []
        for backend in backends:
            if backend.id not in current:
                # get_or_create: a concurrent sign-in of the same user is settled by the
                # maintainer_unique constraint.
                BackendMaintainer.objects.get_or_create(user=user, downstream=backend)
                added.append(backend.full_name)
        stale = {pk: name for pk, name in current.items() if pk not in wanted_ids}
        if stale:
            BackendMaintainer.objects.filter(user=user, downstream_id__in=stale).delete()
        admin: bool | None = None
        if configured_admins:
            admin = _normalise(github_login) in configured_admins
            group, _ = Group.objects.get_or_create(name=ADMIN_GROUP)
            if admin:
                user.groups.add(group)
            else:
                user.groups.remove(group)
    result = RoleSync(
        github_login=github_login,
        maintains=[backend.full_name for backend in backends],
        added=added,
        removed=sorted(stale.values()),
        admin=admin,
    )
    if result.added or result.removed or admin is not None:
        logger.info(
            "github roles synced",
            extra={
                "user": user.pk,
                "github_login": github_login,
                "added": result.added,
                "removed": result.removed,
                "admin": admin,
            },
        )
    return result


def github_login_of(sociallogin: SocialLogin | None) -> str | None:
    """The GitHub login of a social login, or None for other providers."""
    if sociallogin is None or sociallogin.account.provider != PROVIDER_ID:
        return None
    login = (sociallogin.account.extra_data or {}).get("login")
    return str(login) if login else None


def _sync_from_signal(request: HttpRequest | None, sociallogin: SocialLogin | None) -> None:
    login = github_login_of(sociallogin)
    user = sociallogin.user if sociallogin is not None else None
    if login is None or user is None or user.pk is None:
        return
    # A sign-in sends several of these signals; one sync per request is enough.
    marker = (user.pk, login)
    if request is not None and getattr(request, "_crcr_roles_synced", None) == marker:
        return
    sync_roles(user, login)
    if request is not None:
        request._crcr_roles_synced = marker  # type: ignore[attr-defined]


@receiver(user_logged_in, dispatch_uid="crcr-github-roles-on-login")
def _on_login(sender: Any, request: HttpRequest, user: AbstractBaseUser, **kwargs: Any) -> None:
    """Sync roles whenever someone signs in with GitHub."""
    _sync_from_signal(request, kwargs.get("sociallogin"))


@receiver(social_account_added, dispatch_uid="crcr-github-roles-on-connect")
@receiver(social_account_updated, dispatch_uid="crcr-github-roles-on-update")
def _on_social_account(
    sender: Any, request: HttpRequest, sociallogin: SocialLogin, **_: Any
) -> None:
    """Sync roles when a GitHub account is connected to a user or refreshed."""
    _sync_from_signal(request, sociallogin)
