"""Events become notifications once per target, sent by email and to a Slack-like webhook."""

import datetime as dt

import pytest
from django.contrib.auth.models import User

from hud import notifications, periodic, promotion
from hud.models import DemotionWarning, Level, Notification, NotificationTarget, PromotionRequest
from tests.notifications.conftest import WEBHOOK_SECRET_PATH, target
from tests.promotion import UTC, admin, backend, report
from tests.support import builders

pytestmark = pytest.mark.django_db
EMAIL, WEBHOOK = NotificationTarget.Kind.EMAIL, NotificationTarget.Kind.WEBHOOK


@pytest.fixture
def setup(frozen_clock, notify_settings, inline_tasks, webhook):
    """An L2 backend with a pending L3 request, an admin, and both kinds of target."""
    npu = builders.downstream("org/npu", level=Level.L2)
    request = PromotionRequest.objects.create(
        downstream=npu,
        from_level=2,
        to_level=3,
        device="npu",
        oncalls=["alice"],
        evidence={},
        requested_at=frozen_clock(),
    )
    mail = target(EMAIL, "ops@example.org")  # every backend, every event
    hook = target(WEBHOOK, webhook.hook_url, downstream=npu)
    return npu, request, admin(), mail, hook


def test_approval_is_sent_by_email_and_webhook_once(
    setup, webhook, mailoutbox, django_capture_on_commit_callbacks
):
    _, request, ada, _, _ = setup

    with django_capture_on_commit_callbacks(execute=True):
        promotion.approve(ada, request, "ready <!channel> & go")

    assert len(mailoutbox) == 1
    message = mailoutbox[0]
    assert message.to == ["ops@example.org"]
    assert message.subject == "[CRCR] org/npu: L2 → L3 approved"
    assert "Comment: ready <!channel> & go" in message.body
    assert f"https://hud.example.org/crcr/admin/requests/{request.pk}" in message.body
    assert message.extra_headers["X-CRCR-Event"] == f"request:{request.pk}:approved"

    [post] = webhook.received
    assert post.path == WEBHOOK_SECRET_PATH
    assert post.headers["content-type"] == "application/json"
    assert post.body["text"] == "[CRCR] org/npu: L2 → L3 approved"
    section = post.body["blocks"][1]["text"]["text"]
    assert "ready &lt;!channel&gt; &amp; go" in section  # user text cannot ping a channel
    link = post.body["blocks"][2]["elements"][0]["text"]
    assert (
        link == f"<https://hud.example.org/crcr/admin/requests/{request.pk}|Open on the CRCR HUD>"
    )

    rows = Notification.objects.order_by("id")
    assert [(row.event, row.kind, row.status, row.attempts) for row in rows] == [
        (f"request:{request.pk}:approved", EMAIL, "sent", 1),
        (f"request:{request.pk}:approved", WEBHOOK, "sent", 1),
    ]
    assert all(row.sent_at == row.created_at for row in rows)

    # The same event raised again records and sends nothing more.
    request.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        assert notifications.level_decided(request) == []
    assert len(mailoutbox) == 1 and len(webhook.received) == 1
    assert notifications.reconcile() == 0


def test_rejection_reaches_only_targets_of_that_backend_and_event(
    setup, webhook, mailoutbox, django_capture_on_commit_callbacks
):
    npu, request, ada, _, _ = setup
    other = builders.downstream("org/other", level=Level.L2)
    target(EMAIL, "other@example.org", downstream=other)
    target(EMAIL, "warnings-only@example.org", events=[notifications.DEMOTION_WARNING])
    target(WEBHOOK, webhook.hook_url, downstream=npu, events=[notifications.LEVEL_APPROVED])
    paused = target(EMAIL, "paused@example.org")
    paused.enabled = False
    paused.save()

    with django_capture_on_commit_callbacks(execute=True):
        promotion.reject(ada, request, "not yet: flaky")

    assert [message.to for message in mailoutbox] == [["ops@example.org"]]
    assert mailoutbox[0].subject == "[CRCR] org/npu: L2 → L3 rejected"
    assert len(webhook.received) == 1  # `hook` (all events); not the approvals-only one
    assert Notification.objects.filter(event_type="level_rejected").count() == 2


def test_nothing_is_recorded_without_targets(frozen_clock, inline_tasks, mailoutbox):
    npu = builders.downstream("org/npu", level=Level.L2)
    request = PromotionRequest.objects.create(
        downstream=npu, from_level=2, to_level=3, device="x", evidence={}, oncalls=["a"],
        requested_at=frozen_clock(),
    )  # fmt: skip
    promotion.reject(admin(), request, "no")
    assert not Notification.objects.exists() and mailoutbox == []


def test_a_broken_notification_never_blocks_the_decision(setup, monkeypatch):
    npu, request, ada, *_ = setup

    def broken(event):
        raise ValueError("template bug")

    monkeypatch.setattr(notifications.emission, "build_payload", broken)
    promotion.approve(ada, request, "ok")

    request.refresh_from_db()
    npu.refresh_from_db()
    assert request.status == "approved" and npu.level == Level.L3
    assert not Notification.objects.exists()


THU, FRI, SAT = (dt.date(2026, 11, 5) + dt.timedelta(days=i) for i in range(3))


def _run_day(frozen_clock, day: dt.date) -> None:
    frozen_clock.set(dt.datetime.combine(day + dt.timedelta(days=1), dt.time(0, 30), tzinfo=UTC))
    promotion.daily_evaluation(day)


def test_demotion_warning_raised_then_decided_are_two_events(
    frozen_clock, notify_settings, inline_tasks, mailoutbox, django_capture_on_commit_callbacks
):
    silent = backend("org/silent", Level.L2, since=dt.datetime(2026, 8, 1, tzinfo=UTC))
    target(EMAIL, "ops@example.org", downstream=silent)

    with django_capture_on_commit_callbacks(execute=True):
        for day in (THU, FRI, SAT):
            _run_day(frozen_clock, day)
    warning = DemotionWarning.objects.get()
    assert [message.subject for message in mailoutbox] == [
        "[CRCR] org/silent: demotion warning at L2"
    ]
    assert "An admin decides by 2026-11-09" in mailoutbox[0].body
    assert "no_results_for_4_weeks" in mailoutbox[0].body

    with django_capture_on_commit_callbacks(execute=True):
        promotion.decide_warning(admin(), warning, True, "silent for months")
    assert mailoutbox[-1].subject == "[CRCR] org/silent: demoted to L1"
    assert set(Notification.objects.values_list("event", flat=True)) == {
        f"warning:{warning.pk}:opened",
        f"warning:{warning.pk}:demoted",
    }


# --- Backend health ---------------------------------------------------------------------------


def test_stale_backend_is_notified_once_per_quiet_spell(
    frozen_clock, notify_settings, inline_tasks, mailoutbox, django_capture_on_commit_callbacks
):
    notify_settings.CRCR_NOTIFY_STALE_HOURS = 24
    npu = builders.downstream("org/npu", level=Level.L2)
    target(EMAIL, "ops@example.org")
    report(npu)

    frozen_clock.advance(hours=23)
    assert notifications.check_backends()["stale"] == 0
    frozen_clock.advance(hours=2)
    with django_capture_on_commit_callbacks(execute=True):
        assert notifications.check_backends()["stale"] == 1
        assert notifications.check_backends()["stale"] == 0
    assert mailoutbox[0].subject == "[CRCR] org/npu: no results for 25 h"

    report(npu)  # it answers again, then goes quiet again: a new spell
    frozen_clock.advance(hours=30)
    assert notifications.check_backends()["stale"] == 1


def test_silent_backend_is_notified_when_its_latest_dispatches_go_unanswered(
    frozen_clock, notify_settings, inline_tasks, mailoutbox, django_capture_on_commit_callbacks
):
    notify_settings.CRCR_NOTIFY_SILENT_DISPATCHES = 3
    notify_settings.CRCR_NO_RESPONSE_AFTER_SECONDS = 2 * 3600
    npu = builders.downstream("org/npu", level=Level.L3)
    target(EMAIL, "ops@example.org")
    start = frozen_clock()
    for number in range(3):
        row = builders.delivery(f"delivery-{number}", number=number + 1)
        builders.dispatch(row, npu, at=start + dt.timedelta(minutes=10 * number))

    frozen_clock.advance(hours=2, minutes=5)  # only the first two are past the deadline
    assert notifications.check_backends()["silent"] == 0
    frozen_clock.advance(minutes=30)
    with django_capture_on_commit_callbacks(execute=True):
        assert notifications.check_backends()["silent"] == 1
        assert notifications.check_backends()["silent"] == 0
    assert mailoutbox[0].subject == "[CRCR] org/npu: dispatches unanswered"
    assert "got no callback within 2 hours" in mailoutbox[0].body


def test_repeated_l4_gate_failures_are_notified_once_per_streak(
    frozen_clock, notify_settings, inline_tasks, webhook, django_capture_on_commit_callbacks
):
    notify_settings.CRCR_NOTIFY_GATE_FAILURES = 3
    blocking = builders.downstream("org/blocking", level=Level.L4)
    target(WEBHOOK, webhook.hook_url, events=[notifications.GATE_FAILURES])
    report(blocking, "success")
    for _ in range(2):
        frozen_clock.advance(minutes=5)
        report(blocking, "failure")
    assert notifications.notify_gate_failure(blocking) == []

    with django_capture_on_commit_callbacks(execute=True):
        frozen_clock.advance(minutes=5)
        report(blocking, "failure")
        assert len(notifications.notify_gate_failure(blocking, pr_number=77)) == 1
        frozen_clock.advance(minutes=5)
        report(blocking, "failure")  # the same streak goes on: nothing new
        assert notifications.notify_gate_failure(blocking) == []
    [post] = webhook.received
    assert post.body["text"] == "[CRCR] org/blocking: 3 failing PR commits in a row at L4"
    assert "(latest on PR #77)" in post.body["blocks"][1]["text"]["text"]

    frozen_clock.advance(minutes=5)
    report(blocking, "success")  # the streak ends; the next one is a new event
    for _ in range(3):
        frozen_clock.advance(minutes=5)
        report(blocking, "failure")
    assert notifications.check_backends()["gate_failures"] == 1


def test_gate_failures_of_a_backend_below_l4_are_not_notified(
    frozen_clock, notify_settings, inline_tasks
):
    target(EMAIL, "ops@example.org")
    l3 = builders.downstream("org/l3", level=Level.L3)
    for _ in range(4):
        frozen_clock.advance(minutes=5)
        report(l3, "failure")
    assert notifications.notify_gate_failure(l3) == []


def test_periodic_jobs_check_backends_and_resend_due_notifications():
    assert periodic.PERIODIC_JOBS["check_backends"] is notifications.check_backends
    assert periodic.PERIODIC_JOBS["reconcile_notifications"] is notifications.reconcile


def test_maintainers_are_not_users_without_a_target(frozen_clock, inline_tasks, mailoutbox):
    """Nobody gets mail by being a user: only configured targets do."""
    User.objects.create_user("mia", email="mia@example.org")
    npu = builders.downstream("org/npu", level=Level.L2)
    report(npu)
    frozen_clock.advance(days=3)
    assert notifications.check_backends()["stale"] == 0
    assert mailoutbox == []


def test_a_failing_merge_gate_decision_feeds_the_gate_failure_check(
    frozen_clock, notify_settings, inline_tasks, mailoutbox, django_capture_on_commit_callbacks
):
    notify_settings.CRCR_NOTIFY_GATE_FAILURES = 2
    blocking = builders.downstream("org/blocking", level=Level.L4)
    target(EMAIL, "ops@example.org")
    for _ in range(2):
        frozen_clock.advance(minutes=5)
        report(blocking, "failure")
    decision = {
        "head_sha": "f" * 40,
        "state": "failure",
        "blocking": [{"downstream": "org/blocking", "job_name": "a"}],
        "pr_numbers": [4321],
    }

    assert notifications.notify_gate_decision({**decision, "state": "success"}) == []
    with django_capture_on_commit_callbacks(execute=True):
        assert len(notifications.notify_gate_decision(decision)) == 1
    assert "(latest on PR #4321); latest ffffffffffff" in mailoutbox[0].body


def test_timed_out_jobs_do_not_count_as_gate_failures(frozen_clock, notify_settings):
    notify_settings.CRCR_NOTIFY_GATE_FAILURES = 2
    blocking = builders.downstream("org/blocking", level=Level.L4)
    target(EMAIL, "ops@example.org")
    for conclusion in ("failure", "timed_out", "failure"):
        frozen_clock.advance(minutes=5)
        report(blocking, conclusion)
    assert notifications.notify_gate_failure(blocking) == []
