"""`/crcr/admin` and the request page: readable by anyone, forms only for CRCR admins."""

import datetime as dt

import pytest
from django.test import Client

from hud import promotion
from hud.models import DemotionWarning, Level
from tests.promotion import UTC, admin, backend, maintainer, user

pytestmark = pytest.mark.django_db


@pytest.fixture
def pending(frozen_clock):
    """A pending L3 request for org/npu and an open demotion warning for org/silent."""
    npu = backend("org/npu", Level.L2, since=dt.datetime(2026, 8, 1, tzinfo=UTC))
    item = promotion.request_change(
        maintainer(npu), npu, Level.L3, device="npu", oncalls=["alice"], reason="please"
    )
    silent = backend("org/silent", Level.L2)
    warning = DemotionWarning.objects.create(
        downstream=silent,
        level=Level.L2,
        first_failing_on=dt.date(2026, 10, 29),
        deadline=dt.date(2026, 11, 2),
        failing=["no_results_for_4_weeks"],
        created_at=frozen_clock(),
    )
    return item, warning


def _post_forms(content: bytes) -> int:
    return content.count(b'method="post"')


def test_admin_page_is_read_only_for_anonymous_users(pending, client):
    item, warning = pending
    response = client.get("/crcr/admin")
    assert response.status_code == 200
    html = response.content
    assert b"org/npu" in html and f"/crcr/admin/requests/{item.pk}".encode() in html
    assert b"org/silent" in html and b"no_results_for_4_weeks" in html and b"2026-11-02" in html
    assert _post_forms(html) == 0
    assert f"/crcr/admin/warnings/{warning.pk}/".encode() not in html
    assert b"csrfmiddlewaretoken" not in html
    assert b"admins decide" in html


@pytest.mark.parametrize("role", ["anonymous", "maintainer", "signed-in"])
def test_non_admins_see_no_decision_forms(pending, role):
    item, _ = pending
    client = Client()
    if role == "maintainer":
        client.force_login(item.requested_by)
    elif role == "signed-in":
        client.force_login(user("reader"))
    for url in ("/crcr/admin", f"/crcr/admin/requests/{item.pk}"):
        response = client.get(url)
        assert response.status_code == 200
        # Only the sign-out form of the page header may post.
        assert _post_forms(response.content) == (0 if role == "anonymous" else 1)
        assert b"/approve" not in response.content and b"/demote" not in response.content


def test_admin_page_has_the_forms_for_admins(pending):
    item, warning = pending
    client = Client()
    client.force_login(admin())
    html = client.get("/crcr/admin").content
    assert b"org/npu" in html and b"org/silent" in html
    assert f'action="/crcr/admin/warnings/{warning.pk}/demote"'.encode() in html
    assert f'action="/crcr/admin/warnings/{warning.pk}/dismiss"'.encode() in html
    assert b'action="/crcr/admin/overrides"' in html
    assert b'action="/crcr/admin/exclusions"' in html
    assert b"csrfmiddlewaretoken" in html

    page = client.get(f"/crcr/admin/requests/{item.pk}").content
    assert f'action="/crcr/admin/requests/{item.pk}/approve"'.encode() in page
    assert f'action="/crcr/admin/requests/{item.pk}/reject"'.encode() in page
    assert b"job_pass_rate" in page  # the frozen evidence checklist


def test_unknown_request_is_404(client, frozen_clock):
    assert client.get("/crcr/admin/requests/999").status_code == 404


def test_admin_page_lists_history_and_decided_requests(pending):
    item, _ = pending
    ada = admin()
    promotion.approve(ada, item, "go")
    client = Client()
    html = client.get("/crcr/admin").content
    assert b"approved request" in html  # the level history's source
    assert b"No pending requests." in html
    assert f'href="/crcr/admin/requests/{item.pk}">approved'.encode() in html


def test_admin_page_links_sign_in_and_the_admin_tools(pending, client):
    html = client.get("/crcr/admin").content.decode()
    assert '<a href="/accounts/login/?next=/crcr/admin" id="admin-sign-in">' in html
    for url in ("/crcr/admin/notifications", "/crcr/admin/aliases", "/django-admin/"):
        assert f'href="{url}"' in html

    client.force_login(admin())
    assert 'id="admin-sign-in"' not in client.get("/crcr/admin").content.decode()
