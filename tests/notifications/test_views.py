"""`/crcr/admin/notifications` and the Django admin: admins only, CSRF, secrets never shown."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from hud import notifications
from hud.models import Level, Notification, NotificationTarget
from tests.notifications.conftest import WEBHOOK_SECRET_PATH, target
from tests.promotion import admin, user
from tests.support import builders

pytestmark = pytest.mark.django_db
URL = "/crcr/admin/notifications"
SECRET_HOOK = f"https://hooks.slack.example{WEBHOOK_SECRET_PATH}"


def _client(member: User, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(member)
    return client


def _csrf(client: Client) -> str:
    client.get(URL)
    return client.cookies["csrftoken"].value


@pytest.fixture
def npu(frozen_clock):
    """A listed backend."""
    return builders.downstream("org/npu", level=Level.L2)


def test_anonymous_visitors_are_sent_to_sign_in_and_non_admins_refused(client, npu):
    answer = client.get(URL)
    assert answer.status_code == 302
    assert answer["Location"] == f"/accounts/login/?next={URL}"
    assert _client(user("mia")).get(URL).status_code == 403
    assert (
        _client(user("max")).post(URL, {"kind": "email", "address": "a@b.org"}).status_code == 403
    )
    assert not NotificationTarget.objects.exists()


def test_audit_list_shows_what_was_sent_and_masks_webhook_urls(npu, notify_settings):
    hook = target(NotificationTarget.Kind.WEBHOOK, SECRET_HOOK, downstream=npu)
    target(NotificationTarget.Kind.EMAIL, "ops@example.org")
    event = notifications.Event(
        key="stale:1:x",
        event_type=notifications.BACKEND_STALE,
        downstream=npu,
        subject="[CRCR] org/npu: no results for 30 h",
        lines=("quiet",),
    )
    notifications.emit(event)
    Notification.objects.filter(target=hook).update(status="failed", last_error="HTTP 500: x")

    page = _client(admin()).get(URL)

    assert page.status_code == 200
    html = page.content.decode()
    assert "[CRCR] org/npu: no results for 30 h" in html
    assert "stale:1:x" in html and "ops@example.org" in html
    assert "https://hooks.slack.example/…" in html
    assert "s3cr3t" not in html
    assert "Retry now" in html and "HTTP 500: x" in html
    failed_only = _client(admin("ada2")).get(URL, {"status": "failed"}).content.decode()
    assert "ops@example.org</code></td>" not in failed_only.split("Sent and pending")[1]


def test_admin_adds_a_target_with_csrf(npu):
    client = _client(admin(), csrf=True)
    form = {
        "downstream": str(npu.pk),
        "kind": "webhook",
        "address": SECRET_HOOK,
        "events": ["level_approved", "demotion_warning"],
        "description": "#npu-ci",
    }
    assert client.post(URL, form).status_code == 403  # no CSRF token
    answer = client.post(URL, {**form, "csrfmiddlewaretoken": _csrf(client)})

    assert answer.status_code == 302
    created = NotificationTarget.objects.get()
    assert (created.downstream, created.kind, created.address) == (npu, "webhook", SECRET_HOOK)
    assert created.events == ["demotion_warning", "level_approved"]


def test_invalid_target_is_refused_with_the_reason(npu):
    client = _client(admin())
    answer = client.post(URL, {"kind": "email", "address": "not-an-address"})
    assert answer.status_code == 400
    assert "Enter a valid email address." in answer.content.decode()
    answer = client.post(URL, {"kind": "webhook", "address": "ftp://example.org/hook"})
    assert answer.status_code == 400
    assert not NotificationTarget.objects.exists()


def test_admin_pauses_resumes_and_removes_a_target(npu):
    item = target(NotificationTarget.Kind.EMAIL, "ops@example.org")
    client = _client(admin())
    toggle = f"{URL}/targets/{item.pk}/toggle"
    assert _client(user("mia")).post(toggle).status_code == 403

    client.post(toggle)
    item.refresh_from_db()
    assert item.enabled is False
    client.post(toggle)
    item.refresh_from_db()
    assert item.enabled is True
    assert client.get(toggle).status_code == 405

    client.post(f"{URL}/targets/{item.pk}/delete")
    assert not NotificationTarget.objects.exists()


def test_admin_retries_a_failed_notification(
    npu, webhook, notify_settings, inline_tasks, django_capture_on_commit_callbacks
):
    hook = target(NotificationTarget.Kind.WEBHOOK, webhook.hook_url)
    notifications.emit(
        notifications.Event("x:1", notifications.BACKEND_SILENT, npu, "[CRCR] x", ("y",))
    )
    row = Notification.objects.get(target=hook)
    row.status, row.next_attempt_at, row.attempts = "failed", None, 8
    row.save()

    with django_capture_on_commit_callbacks(execute=True):
        answer = _client(admin()).post(f"{URL}/{row.pk}/retry")

    assert answer.status_code == 302
    row.refresh_from_db()
    assert row.status == "sent" and row.attempts == 9
    assert len(webhook.received) == 1
    assert _client(user("mia")).post(f"{URL}/{row.pk}/retry").status_code == 403


def test_django_admin_lists_targets_without_their_secret(npu):
    target(NotificationTarget.Kind.WEBHOOK, SECRET_HOOK, downstream=npu)
    root = User.objects.create_superuser("root", "root@example.org", "pw-pw-pw-pw")
    client = _client(root)

    listing = client.get("/django-admin/hud/notificationtarget/")
    assert listing.status_code == 200
    assert "org/npu" in listing.content.decode()
    assert "s3cr3t" not in listing.content.decode()
    assert client.get("/django-admin/hud/notification/").status_code == 200
    assert client.get("/django-admin/hud/notification/add/").status_code == 403
    assert client.get("/django-admin/hud/backendmaintainer/").status_code == 200
