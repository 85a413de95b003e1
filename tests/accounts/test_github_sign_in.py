"""Sign-in with GitHub through the whole OAuth flow against a local fake, and password sign-in."""

from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

from hud import promotion
from hud.models import BackendMaintainer, Level
from hud.ops.demo import DEMO_USERS, ensure_demo_users
from tests.accounts.conftest import CLIENT_SECRET, FakeGitHubOAuth, GitHubUser
from tests.support import builders

pytestmark = pytest.mark.django_db
User = get_user_model()

ALICE = GitHubUser(login="Alice-OnCall", id=1001, email="alice@example.org", name="Alice")
ROOT = GitHubUser(login="root-admin", id=1002, email="root@example.org")
NOBODY = GitHubUser(login="passer-by", id=1003)


def _csrf_client() -> Client:
    client = Client(enforce_csrf_checks=True)
    page = client.get("/accounts/login/?next=/crcr/admin")
    assert page.status_code == 200
    return client


def sign_in_with_github(client: Client, fake: FakeGitHubOAuth, person: GitHubUser):
    """Press the button, let the 'browser' visit the fake GitHub, come back with the code."""
    fake.signing_in = person
    start = client.post(
        "/accounts/github/login/",
        {"next": "/crcr/admin", "csrfmiddlewaretoken": client.cookies["csrftoken"].value},
    )
    assert start.status_code == 302, start.content
    authorize = start["Location"]
    assert authorize.startswith(f"{fake.url}/login/oauth/authorize?")
    answer = httpx.get(authorize, follow_redirects=False, timeout=5)
    assert answer.status_code == 302
    back = urlsplit(answer.headers["location"])
    assert back.path == "/accounts/github/login/callback/"
    return client.get(back.path, dict(parse_qsl(back.query)))


def _signed_in(client: Client):
    user_id = client.session.get("_auth_user_id")
    return User.objects.get(pk=user_id) if user_id else None


def test_login_page_offers_github_only_when_configured(client, settings):
    providers = dict(settings.SOCIALACCOUNT_PROVIDERS)
    providers["github"] = {**providers["github"], "APPS": []}
    settings.SOCIALACCOUNT_PROVIDERS = providers
    assert b"Sign in with GitHub" not in client.get("/accounts/login/").content


def test_login_page_offers_github_as_a_csrf_protected_post_when_configured(
    client, fake_github_oauth
):
    html = client.get("/accounts/login/?next=/crcr/admin").content.decode()
    assert '<form method="post" action="/accounts/github/login/?next=%2Fcrcr%2Fadmin"' in html
    assert "Sign in with GitHub" in html and 'name="csrfmiddlewaretoken"' in html
    assert 'name="password"' in html  # the password form stays


def test_github_sign_in_makes_an_oncall_the_maintainer_of_its_backend(fake_github_oauth):
    npu = builders.downstream("org/npu", level=Level.L3, oncalls=["alice-oncall", "bob"])
    builders.downstream("org/other", level=Level.L2, oncalls=["bob"])
    client = _csrf_client()

    done = sign_in_with_github(client, fake_github_oauth, ALICE)

    assert done.status_code == 302
    assert done["Location"] == "/crcr/admin"
    user = _signed_in(client)
    assert user is not None and user.username == "Alice-OnCall"
    assert promotion.maintains(user, npu)
    assert list(
        BackendMaintainer.objects.filter(user=user).values_list("downstream", flat=True)
    ) == [npu.id]
    assert not promotion.is_admin(user)
    # The code was exchanged with the configured secret, then the API was read with the token.
    exchange = next(r for r in fake_github_oauth.requests if r.method == "POST")
    assert exchange.form["client_secret"] == [CLIENT_SECRET]
    assert exchange.form["redirect_uri"] == ["http://testserver/accounts/github/login/callback/"]
    assert fake_github_oauth.paths()[-2:] == ["/api/user", "/api/user/emails"]
    assert user.email == "alice@example.org"


def test_github_sign_in_of_a_listed_admin_joins_the_admin_group(fake_github_oauth, settings):
    settings.CRCR_ADMIN_LOGINS = ["ROOT-admin"]
    client = _csrf_client()

    sign_in_with_github(client, fake_github_oauth, ROOT)

    user = _signed_in(client)
    assert promotion.is_admin(user)
    assert client.get("/crcr/admin/notifications").status_code == 200


def test_next_sign_in_follows_the_allowlist_and_admin_list(fake_github_oauth, settings):
    settings.CRCR_ADMIN_LOGINS = ["alice-oncall"]
    npu = builders.downstream("org/npu", level=Level.L3, oncalls=["alice-oncall"])
    sign_in_with_github(_csrf_client(), fake_github_oauth, ALICE)
    user = User.objects.get(username="Alice-OnCall")
    assert promotion.maintains(user, npu) and promotion.is_admin(user)

    npu.oncalls = ["bob"]
    npu.save(update_fields=["oncalls"])
    settings.CRCR_ADMIN_LOGINS = ["someone-else"]
    client = _csrf_client()
    sign_in_with_github(client, fake_github_oauth, ALICE)

    assert _signed_in(client) == user  # the same account, found by GitHub id
    assert not BackendMaintainer.objects.filter(user=user).exists()
    assert not promotion.is_admin(user)


def test_github_user_without_a_role_signs_in_read_only(fake_github_oauth):
    builders.downstream("org/npu", level=Level.L3, oncalls=["alice-oncall"])
    client = _csrf_client()

    sign_in_with_github(client, fake_github_oauth, NOBODY)

    user = _signed_in(client)
    assert user.username == "passer-by"
    assert not BackendMaintainer.objects.filter(user=user).exists()
    assert client.get("/crcr/admin/notifications").status_code == 403


def test_callback_with_a_forged_state_signs_nobody_in(fake_github_oauth):
    client = _csrf_client()
    fake_github_oauth.signing_in = ALICE
    answer = client.get("/accounts/github/login/callback/", {"code": "x", "state": "forged"})

    assert answer.status_code == 401
    assert b"Third-Party Login Failure" in answer.content
    assert _signed_in(client) is None
    assert not any(r.path == "/login/oauth/access_token" for r in fake_github_oauth.requests)


def test_starting_github_sign_in_needs_csrf(fake_github_oauth):
    client = _csrf_client()
    answer = client.post("/accounts/github/login/", {"next": "/crcr"})
    assert answer.status_code == 403
    assert fake_github_oauth.requests == []


def test_local_sign_up_is_closed(client):
    client.post(
        "/accounts/signup/",
        {
            "username": "mallory",
            "password1": "a-long-pass-phrase",
            "password2": "a-long-pass-phrase",
        },
    )
    assert not User.objects.filter(username="mallory").exists()


def test_password_sign_in_still_works_for_the_demo_users():
    ensure_demo_users()
    login, password, _, _ = DEMO_USERS[0]
    client = _csrf_client()

    answer = client.post(
        "/accounts/login/",
        {
            "username": login,
            "password": password,
            "next": "/crcr/admin",
            "csrfmiddlewaretoken": client.cookies["csrftoken"].value,
        },
    )

    assert answer.status_code == 302 and answer["Location"] == "/crcr/admin"
    assert _signed_in(client).username == login
    assert Group.objects.get(name=promotion.ADMIN_GROUP).user_set.filter(username=login).exists()
    page = client.get("/crcr")
    assert b"Sign out" in page.content
    out = client.post(
        "/accounts/logout/", {"csrfmiddlewaretoken": client.cookies["csrftoken"].value}
    )
    assert out.status_code in (200, 302)
    assert _signed_in(client) is None


def test_wrong_password_is_refused():
    User.objects.create_user("pat", password="right-horse-battery")
    client = _csrf_client()
    answer = client.post(
        "/accounts/login/",
        {
            "username": "pat",
            "password": "wrong",
            "csrfmiddlewaretoken": client.cookies["csrftoken"].value,
        },
    )
    assert answer.status_code == 200
    assert _signed_in(client) is None


def test_sign_in_link_points_at_the_login_page(client):
    page = client.get("/crcr")
    assert b'href="/accounts/login/?next=/crcr"' in page.content


# --- GitHub not configured, and throttled password sign-in (issue 17) ----------------------


def _without_github_app(settings):
    providers = dict(settings.SOCIALACCOUNT_PROVIDERS)
    providers["github"] = {**providers["github"], "APPS": []}
    settings.SOCIALACCOUNT_PROVIDERS = providers


@pytest.mark.parametrize("url", ["/accounts/github/login/", "/accounts/github/login/callback/"])
def test_github_sign_in_when_not_configured_is_a_clear_page(client, settings, url):
    _without_github_app(settings)
    response = client.get(url)
    assert response.status_code == 404
    assert b"not configured" in response.content


@pytest.mark.parametrize(
    ("url", "fields"),
    [
        ("/accounts/login/", {}),
        ("/django-admin/login/", {"this_is_the_login_form": "1"}),
    ],
)
def test_password_sign_in_is_throttled_after_repeated_failures(client, url, fields):
    User.objects.create_user("mallory-target", password="right-password", is_staff=True)
    for _ in range(40):
        client.post(url, {"username": "mallory-target", "password": "wrong", **fields})
    response = client.post(url, {"username": "mallory-target", "password": "right-password"})
    assert response.status_code == 200  # the form again, not a redirect into the site
    assert b"Too many failed login attempts" in response.content
    assert "_auth_user_id" not in client.session


def test_password_sign_in_succeeds_under_the_limit(client):
    User.objects.create_user("alice-local", password="right-password")
    client.post("/accounts/login/", {"username": "alice-local", "password": "wrong"})
    response = client.post(
        "/accounts/login/", {"username": "alice-local", "password": "right-password"}
    )
    assert response.status_code == 302
    assert client.session["_auth_user_id"]


def test_login_page_lists_the_demo_sign_ins_when_the_demo_users_exist(client, settings):
    settings.CRCR_SHOW_DEMO_SIGN_INS = True
    assert b"demo-sign-ins" not in client.get("/accounts/login/").content

    ensure_demo_users()
    html = client.get("/accounts/login/?next=/crcr/admin").content.decode()

    for login, password, _, _ in DEMO_USERS:
        assert (
            f'<tr data-login="{login}"><td><code>{login}</code></td><td><code>{password}</code>'
            in html
        )
        assert f"Sign in as {login}</button>" in html
    assert html.count('name="next" value="/crcr/admin"') == len(DEMO_USERS) + 1


def test_login_page_hides_the_demo_sign_ins_outside_the_demo(client, settings):
    ensure_demo_users()
    settings.CRCR_SHOW_DEMO_SIGN_INS = False

    html = client.get("/accounts/login/").content.decode()

    assert "demo-sign-ins" not in html
    assert DEMO_USERS[0][1] not in html


def test_demo_admin_can_use_the_django_admin():
    ensure_demo_users()
    ensure_demo_users()  # idempotent: a second seed changes nothing
    login, password, _, _ = DEMO_USERS[0]
    client = Client()
    assert client.login(username=login, password=password)

    assert client.get("/django-admin/").status_code == 200
    for model in ("notificationtarget", "notification", "backendmaintainer"):
        assert client.get(f"/django-admin/hud/{model}/").status_code == 200
    assert client.get("/django-admin/hud/notificationtarget/add/").status_code == 200
    assert client.get("/django-admin/auth/user/add/").status_code == 200
    assert client.get("/django-admin/hud/notification/add/").status_code == 403

    maintainer_login, maintainer_password, _, _ = DEMO_USERS[1]
    other = Client()
    assert other.login(username=maintainer_login, password=maintainer_password)
    assert other.get("/django-admin/").status_code == 302  # not staff: sent to the admin login
