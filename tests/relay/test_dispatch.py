"""Sending dispatches: retries, GitHub failing then recovering, not installed, the claim."""

import json
import threading
from collections import Counter

import pytest
from django.db import connection

from hud import relay as relay_service
from hud import tasks
from hud.core import taskqueue
from hud.models import Delivery, Dispatch
from tests.relay.conftest import fixture_body, new_guid, post_webhook
from tests.support.fake_github import Canned

LISTED = 4


def _sent_per_repo(fake) -> Counter:
    return Counter(d["repository"] for d in fake.dispatches)


def _reconcile(django_capture_on_commit_callbacks) -> int:
    with django_capture_on_commit_callbacks(execute=True):
        return relay_service.reconcile()


def _past_the_lease(clock) -> None:
    clock.advance(seconds=relay_service.lease_seconds() + 1)


def test_github_errors_then_recovery_send_each_dispatch_exactly_once(relay):
    # 500, 502, secondary limit with retry-after, 429: the client retries inside one attempt.
    relay.github.enqueue(
        "POST",
        "/repos/*/dispatches",
        Canned.server_error(500),
        Canned.server_error(502),
        Canned.secondary_rate_limit(30),
        Canned(429, {"message": "Too many requests"}),
    )
    relay.post("pull_request", fixture_body("pull_request.opened"))

    assert _sent_per_repo(relay.github) == Counter(
        {"org1/repo1": 1, "org2/repo2": 1, "org3/device-repo": 1, "org4/repo4": 1}
    )
    assert set(Dispatch.objects.values_list("outcome", flat=True)) == {"sent"}
    assert 30.0 in relay.github.sleeps  # GitHub's retry-after was honoured, without sleeping


def test_an_outage_leaves_dispatches_pending_and_the_reconciler_sends_each_once(
    relay, django_capture_on_commit_callbacks
):
    relay.github.set_outage(Canned.server_error(503))
    relay.post("pull_request", fixture_body("pull_request.opened"))

    rows = list(Dispatch.objects.all())
    assert {r.outcome for r in rows} == {"pending"}
    assert all(r.reason.startswith("attempt 1 failed, will retry: GitHub") for r in rows)
    assert {name for name, _, result in relay.tasks.ran} == {"crcr.send_dispatch"}
    assert {result for _, _, result in relay.tasks.ran} == {"retry"}

    # Within the lease nothing is re-sent, even if asked twice.
    assert _reconcile(django_capture_on_commit_callbacks) == 0
    relay.github.set_outage(None)
    _past_the_lease(relay.clock)
    assert _reconcile(django_capture_on_commit_callbacks) == LISTED
    assert _reconcile(django_capture_on_commit_callbacks) == 0  # nothing left pending
    for row in rows:  # a stray duplicate enqueue is a no-op
        assert tasks.send_dispatch.run(row.id) == "skipped"

    assert set(_sent_per_repo(relay.github).values()) == {1}
    assert len(relay.github.dispatches) == LISTED
    rows = list(Dispatch.objects.all())
    assert {(r.outcome, r.attempts, r.reason) for r in rows} == {("sent", 2, "")}
    assert all(r.dispatched_at == relay.clock() for r in rows)


def test_a_lost_enqueue_is_picked_up_by_the_reconciler(
    db,
    relay_settings,
    fake_github,
    backends,
    client,
    frozen_clock,
    inline_tasks,
    django_capture_on_commit_callbacks,
):
    # The broker or process died between commit and enqueue: the on-commit work is lost.
    with django_capture_on_commit_callbacks(execute=False):
        post_webhook(client, "pull_request", fixture_body("pull_request.opened"))
    assert not fake_github.dispatches
    frozen_clock.advance(seconds=60)
    assert _reconcile(django_capture_on_commit_callbacks) == 0  # too young: maybe in flight
    frozen_clock.advance(seconds=120)
    assert _reconcile(django_capture_on_commit_callbacks) == LISTED
    assert len(fake_github.dispatches) == LISTED
    assert set(Dispatch.objects.values_list("outcome", flat=True)) == {"sent"}


def test_not_installed_is_recorded_and_never_retried(relay, django_capture_on_commit_callbacks):
    relay.github.uninstall("org2/repo2")
    relay.post("pull_request", fixture_body("pull_request.opened"))

    row = Dispatch.objects.get(downstream__full_name="org2/repo2")
    assert row.outcome == "not_installed"
    assert "not installed on org2/repo2" in row.reason
    _past_the_lease(relay.clock)
    assert _reconcile(django_capture_on_commit_callbacks) == 0
    assert tasks.send_dispatch.run(row.id) == "skipped"
    assert "org2/repo2" not in _sent_per_repo(relay.github)
    assert len(relay.github.dispatches) == LISTED - 1


def test_a_validation_error_fails_without_retry(relay, django_capture_on_commit_callbacks):
    relay.github.enqueue(
        "POST", "/repos/org4/repo4/dispatches", Canned(422, {"message": "Invalid request."})
    )
    relay.post("pull_request", fixture_body("pull_request.opened"))
    row = Dispatch.objects.get(downstream__full_name="org4/repo4")
    assert (row.outcome, row.attempts) == ("failed", 1)
    assert "422" in row.reason and "Invalid request." in row.reason
    _past_the_lease(relay.clock)
    assert _reconcile(django_capture_on_commit_callbacks) == 0


def test_retries_stop_after_the_attempt_limit(relay, settings, django_capture_on_commit_callbacks):
    settings.CRCR_DISPATCH_MAX_ATTEMPTS = 2
    relay.github.set_outage(Canned.server_error(502))
    relay.post("pull_request", fixture_body("pull_request.opened"))
    _past_the_lease(relay.clock)
    _reconcile(django_capture_on_commit_callbacks)
    rows = list(Dispatch.objects.all())
    assert {(r.outcome, r.attempts) for r in rows} == {("failed", 2)}
    assert all(r.reason.startswith("gave up after 2 attempts") for r in rows)
    relay.github.set_outage(None)
    _past_the_lease(relay.clock)
    assert _reconcile(django_capture_on_commit_callbacks) == 0
    assert not relay.github.dispatches


def test_a_long_retry_after_is_handed_to_the_task_queue_not_slept_through(relay):
    # 403 secondary limit asking for 10 minutes: over the client's wait budget, so the
    # attempt ends and the task is told to come back no sooner than GitHub asked.
    relay.github.set_outage(Canned.secondary_rate_limit(600))
    relay.post("pull_request", fixture_body("pull_request.opened"))
    row = Dispatch.objects.first()
    assert row.outcome == "pending"
    _past_the_lease(relay.clock)
    outcome = relay_service.send_dispatch(row.id)
    assert outcome.result == relay_service.SendResult.RETRY
    assert outcome.retry_in >= 600
    assert max(relay.github.sleeps, default=0) < 600


def test_retry_delay_is_past_the_lease_and_grows():
    lease = relay_service.lease_seconds()
    assert relay_service.retry_delay(1, None) >= lease
    assert relay_service.retry_delay(1, 900) >= 900
    assert relay_service.retry_delay(10, None) >= 3600


def test_an_oversized_payload_is_trimmed_and_the_trim_recorded(relay):
    body = fixture_body("pull_request.opened")
    body["pull_request"]["body"] = "Long description. " * 6000  # ~108 KB
    relay.post("pull_request", body)

    assert len(relay.github.dispatches) == LISTED
    sent = relay.github.dispatches[0]["client_payload"]
    assert len(json.dumps(sent).encode()) < 64 * 1024
    trimmed_body = sent["payload"]["pull_request"]["body"]
    assert trimmed_body.startswith("Long description. ")
    assert trimmed_body.endswith(
        "(trimmed by the CRCR relay: the dispatch payload must stay under 64 KB)"
    )
    untouched = {k: v for k, v in sent["payload"].items() if k != "pull_request"}
    assert untouched == {k: v for k, v in body.items() if k != "pull_request"}
    trims = list(Dispatch.objects.values_list("trimmed_fields", flat=True))
    assert trims == [["pull_request.body"]] * LISTED
    pr = {k: v for k, v in sent["payload"]["pull_request"].items() if k != "body"}
    assert pr == {k: v for k, v in body["pull_request"].items() if k != "body"}


def test_a_payload_too_large_even_without_text_is_compacted(relay):
    body = fixture_body("pull_request.opened")
    body["pull_request"]["labels"] = [
        {"name": f"label-{i}", "description": "x" * 300} for i in range(300)
    ]
    relay.post("pull_request", body)
    sent = relay.github.dispatches[0]["client_payload"]
    assert len(json.dumps(sent).encode()) < 64 * 1024
    assert sent["payload"]["repository"]["full_name"] == "pytorch/pytorch"
    assert sent["payload"]["pull_request"]["head"]["sha"] == body["pull_request"]["head"]["sha"]
    assert Dispatch.objects.first().trimmed_fields


def test_the_dispatch_app_is_used_when_configured(relay):
    app = relay.github.enable_dispatch_app()
    for name in ("org1/repo1", "org2/repo2", "org3/device-repo", "org4/repo4"):
        relay.github.install(name, app_id=app.app_id)
    relay.post("pull_request", fixture_body("pull_request.opened"))
    assert len(relay.github.dispatches) == LISTED
    lookups = relay.github.requests_to("GET", "/repos/*/installation")
    assert not any(r.path.startswith("/repos/pytorch/") for r in lookups)


@pytest.mark.django_db(transaction=True)
def test_concurrent_sends_of_one_dispatch_reach_github_once(
    relay_settings, fake_github, backends, frozen_clock
):
    guid = new_guid()
    body = fixture_body("pull_request.opened")
    raw = json.dumps(body).encode()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(taskqueue, "enqueue", lambda *a: None)  # nothing sent by the webhook itself
        relay_service.receive_webhook(guid, "pull_request", body, raw)
    dispatch_id = Dispatch.objects.get(downstream__full_name="org2/repo2").id
    barrier = threading.Barrier(6)
    results = []

    def send() -> None:
        barrier.wait()
        try:
            results.append(relay_service.send_dispatch(dispatch_id).result)
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert Counter(results) == {"sent": 1, "skipped": 5}
    assert _sent_per_repo(fake_github) == {"org2/repo2": 1}
    assert Delivery.objects.count() == 1
