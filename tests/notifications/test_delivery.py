"""Delivery: retries with backoff, giving up, timeouts, leases, and no secret in errors."""

import datetime as dt
import socket

import pytest

from hud import notifications, tasks
from hud.models import Level, Notification, NotificationTarget
from tests.notifications.conftest import WEBHOOK_SECRET_PATH, target
from tests.support import builders

pytestmark = pytest.mark.django_db
EMAIL, WEBHOOK = NotificationTarget.Kind.EMAIL, NotificationTarget.Kind.WEBHOOK


def _event(npu, key: str = "test:1") -> notifications.Event:
    return notifications.Event(
        key=key,
        event_type=notifications.BACKEND_STALE,
        downstream=npu,
        subject="[CRCR] org/npu: test",
        lines=("a line",),
        path="/crcr/org/npu",
    )


@pytest.fixture
def npu(frozen_clock, notify_settings):
    """A backend to notify about."""
    return builders.downstream("org/npu", level=Level.L2)


def test_server_error_is_retried_with_backoff_until_sent(
    npu, frozen_clock, webhook, inline_tasks, django_capture_on_commit_callbacks
):
    target(WEBHOOK, webhook.hook_url)
    webhook.answer_next(503)
    with django_capture_on_commit_callbacks(execute=True):
        [row_id] = notifications.emit(_event(npu))

    row = Notification.objects.get(pk=row_id)
    assert (row.status, row.attempts) == ("failed", 1)
    assert row.last_error.startswith("HTTP 503")
    wait = (row.next_attempt_at - frozen_clock()).total_seconds()
    assert 48 <= wait <= 60  # a minute, jittered down
    assert notifications.reconcile() == 0  # not due yet

    frozen_clock.advance(seconds=61)
    with django_capture_on_commit_callbacks(execute=True):
        assert notifications.reconcile() == 1
    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_error) == ("sent", 2, "")
    assert row.next_attempt_at is None and len(webhook.received) == 2
    assert [name for name, _, _ in inline_tasks.ran] == ["crcr.send_notification"] * 2


def test_client_error_is_not_retried(
    npu, webhook, inline_tasks, django_capture_on_commit_callbacks
):
    target(WEBHOOK, webhook.hook_url)
    webhook.answer_next(404)
    with django_capture_on_commit_callbacks(execute=True):
        [row_id] = notifications.emit(_event(npu))

    row = Notification.objects.get(pk=row_id)
    assert (row.status, row.next_attempt_at) == ("failed", None)
    assert row.last_error == "HTTP 404: invalid_token"
    assert notifications.reconcile() == 0


def test_gives_up_after_the_configured_attempts(npu, frozen_clock, webhook, notify_settings):
    notify_settings.CRCR_NOTIFY_MAX_ATTEMPTS = 3
    target(WEBHOOK, webhook.hook_url)
    webhook.answer_next(500, times=5)
    [row_id] = notifications.emit(_event(npu))

    results = []
    for _ in range(4):
        results.append(notifications.deliver(row_id).result)
        frozen_clock.advance(hours=7)
    assert results == ["retry", "retry", "failed", "skipped"]
    row = Notification.objects.get(pk=row_id)
    assert (row.status, row.attempts, row.next_attempt_at) == ("failed", 3, None)


def test_slow_webhook_times_out_and_is_retried(npu, webhook, notify_settings):
    notify_settings.CRCR_NOTIFY_WEBHOOK_TIMEOUT = 0.2
    target(WEBHOOK, webhook.hook_url)
    webhook.answer_next(200, delay=1.0)
    [row_id] = notifications.emit(_event(npu))

    assert notifications.deliver(row_id).result == "retry"
    row = Notification.objects.get(pk=row_id)
    assert row.last_error.startswith("ReadTimeout")


def test_connection_error_never_records_the_webhook_secret(npu):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: connections are refused
    target(WEBHOOK, f"http://127.0.0.1:{port}{WEBHOOK_SECRET_PATH}")
    [row_id] = notifications.emit(_event(npu))

    assert notifications.deliver(row_id).result == "retry"
    row = Notification.objects.get(pk=row_id)
    assert row.last_error.startswith("ConnectError")
    assert "s3cr3t" not in row.last_error and "s3cr3t" not in row.recipient
    assert row.recipient == "http://127.0.0.1/…"


def test_unreachable_mail_server_is_retried(npu, notify_settings):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    notify_settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    notify_settings.EMAIL_HOST, notify_settings.EMAIL_PORT = "127.0.0.1", port
    target(EMAIL, "ops@example.org")
    [row_id] = notifications.emit(_event(npu))

    assert notifications.deliver(row_id).result == "retry"
    assert "ConnectionRefusedError" in Notification.objects.get(pk=row_id).last_error


def test_a_claimed_notification_is_not_sent_twice(npu, frozen_clock, webhook):
    target(WEBHOOK, webhook.hook_url)
    [row_id] = notifications.emit(_event(npu))
    Notification.objects.filter(pk=row_id).update(
        claimed_until=frozen_clock() + dt.timedelta(minutes=1)
    )

    assert notifications.deliver(row_id).result == "skipped"
    assert notifications.reconcile() == 0
    assert webhook.received == []
    frozen_clock.advance(minutes=2)  # the lease of a crashed sender ran out
    assert notifications.deliver(row_id).result == "sent"


def test_a_lost_enqueue_is_sent_by_the_reconciler(
    npu, webhook, inline_tasks, django_capture_on_commit_callbacks
):
    target(WEBHOOK, webhook.hook_url)
    notifications.emit(_event(npu))  # its on-commit never runs: the enqueue is lost
    assert webhook.received == []

    with django_capture_on_commit_callbacks(execute=True):
        assert notifications.reconcile() == 1
    assert len(webhook.received) == 1
    assert Notification.objects.get().status == "sent"


def test_a_paused_target_gets_nothing_already_queued(npu, webhook):
    hook = target(WEBHOOK, webhook.hook_url)
    [row_id] = notifications.emit(_event(npu))
    hook.enabled = False
    hook.save()

    assert notifications.deliver(row_id).result == "failed"
    assert webhook.received == []
    assert "disabled" in Notification.objects.get(pk=row_id).last_error


def test_the_send_task_is_registered_under_a_stable_name():
    assert tasks.send_notification.name == "crcr.send_notification"
    assert tasks.reconcile_notifications.name == "crcr.reconcile_notifications"
    assert tasks.check_backends.name == "crcr.check_backends"
