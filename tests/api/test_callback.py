"""POST /github/callback: every answer of CRCR.md's tables, in the documented order."""

import datetime as dt
import json
from unittest import mock

import pytest
from django.db import DatabaseError

from hud.models import FailedTest, Job, Level
from tests.support import builders

pytestmark = pytest.mark.django_db
URL = "/github/callback"
REPO = "org/repo"


def post(client, oidc, body, repository=REPO, **headers):
    """Send a callback the way the public action does (curl --data @file, JSON)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(
        URL, raw, content_type="application/json", **{**oidc.headers(repository), **headers}
    )


def assert_error(response, status, code, field=None):
    """The shared error body."""
    assert response.status_code == status, response.content
    body = response.json()
    assert body["ok"] is False
    assert body["error"] == code
    assert body["detail"]
    assert body["field"] == field
    return body


# --- The public action's own flow ----------------------------------------------------------


def test_action_flow_stores_server_side_queue_and_execution_times(
    client, oidc, backend, frozen_clock
):
    delivery = builders.delivery()
    builders.dispatch(delivery, backend)
    frozen_clock.advance(minutes=7)
    started = post(client, oidc, builders.callback_body())
    assert started.status_code == 200
    assert started.json() == {"ok": True, "status": "created", "job": started.json()["job"]}

    frozen_clock.advance(minutes=50)
    finished = post(
        client,
        oidc,
        builders.callback_body(
            status="completed",
            conclusion="success",
            test_results={"passed": 8430, "failed": 0, "skipped": 20, "total": 8450},
        ),
    )
    assert finished.json()["status"] == "updated"

    job = Job.objects.get()
    assert job.queue_seconds == 7 * 60
    assert job.execution_seconds == 50 * 60
    assert job.timing_source == "server"
    assert job.verified is True
    assert (job.head_sha, job.pr_number) == (builders.HEAD_SHA, 1234)
    listed = client.get(f"/api/v1/jobs?downstream={REPO}").json()["results"]
    assert [(row["conclusion"], row["queue_seconds"], row["tests_passed"]) for row in listed] == [
        ("success", 420.0, 8430)
    ]


def test_trailing_slash_url_is_accepted_too(client, oidc, backend):
    response = client.post(
        URL + "/",
        json.dumps(builders.callback_body()),
        content_type="application/json",
        **oidc.headers(REPO),
    )
    assert response.json()["status"] == "created"


# --- Answer order ---------------------------------------------------------------------------


def test_body_over_two_megabytes_is_413_before_the_token_is_looked_at(client, backend):
    big = b'{"padding": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    response = client.post(URL, big, content_type="application/json")
    assert_error(response, 413, "body_too_large")
    assert Job.objects.count() == 0


def test_missing_token_is_401(client, backend):
    response = client.post(
        URL, json.dumps(builders.callback_body()), content_type="application/json"
    )
    assert_error(response, 401, "invalid_token")


def test_token_from_another_key_is_401(client, oidc, backend):
    forged = oidc.mint(REPO, key=oidc.unpublished.private_key)
    response = client.post(
        URL,
        json.dumps(builders.callback_body()),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {forged}",
    )
    assert_error(response, 401, "invalid_token")
    assert Job.objects.count() == 0


def test_reused_token_is_401_and_stores_nothing_more(client, oidc, backend):
    token = oidc.mint(REPO)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    first = client.post(
        URL, json.dumps(builders.callback_body()), content_type="application/json", **headers
    )
    assert first.status_code == 200
    replay = client.post(
        URL,
        json.dumps(builders.callback_body(status="completed", conclusion="failure")),
        content_type="application/json",
        **headers,
    )
    assert_error(replay, 401, "invalid_token")
    assert Job.objects.get().status == "in_progress"


def test_repository_not_in_the_allowlist_is_403(client, oidc, backend):
    response = post(client, oidc, builders.callback_body("other/repo"), repository="other/repo")
    assert_error(response, 403, "not_allowlisted")


def test_delisted_repository_is_403(client, oidc, backend):
    backend.delisted = True
    backend.save()
    assert_error(post(client, oidc, builders.callback_body()), 403, "not_allowlisted")


def test_repository_claim_matches_the_allowlist_case_insensitively(client, oidc, backend):
    response = post(client, oidc, builders.callback_body("Org/Repo"), repository="Org/Repo")
    assert response.json()["status"] == "created"
    assert Job.objects.get().downstream == backend


def test_level_l1_is_ignored_and_nothing_is_stored(client, oidc, frozen_clock):
    builders.downstream(REPO, Level.L1)
    response = post(client, oidc, builders.callback_body())
    assert response.status_code == 200
    assert response.json() == {"ok": True, "status": "ignored", "job": None}
    assert Job.objects.count() == 0


def test_level_is_checked_before_the_body_so_l1_garbage_is_still_ignored(
    client, oidc, frozen_clock
):
    builders.downstream(REPO, Level.L1)
    assert post(client, oidc, b"not json").json()["status"] == "ignored"


def test_rate_limit_allows_a_burst_of_twice_the_rate_then_answers_429(
    client, oidc, backend, settings, frozen_clock
):
    settings.CRCR_RATE_LIMIT_PER_MIN = 3
    answers = [
        post(client, oidc, builders.callback_body(run_id=100 + index)).status_code
        for index in range(7)
    ]
    assert answers == [200] * 6 + [429]
    limited = post(client, oidc, builders.callback_body(run_id=200))
    assert_error(limited, 429, "rate_limited")
    assert int(limited["Retry-After"]) >= 1
    assert Job.objects.count() == 6

    frozen_clock.advance(seconds=20)  # 3/min refills one token every 20 s
    assert post(client, oidc, builders.callback_body(run_id=300)).status_code == 200


def test_rate_limit_is_per_repository(client, oidc, backend, settings):
    settings.CRCR_RATE_LIMIT_PER_MIN = 1
    builders.downstream("org/other", Level.L2)
    for index in range(2):
        assert post(client, oidc, builders.callback_body(run_id=index)).status_code == 200
    assert post(client, oidc, builders.callback_body(run_id=9)).status_code == 429
    other = post(client, oidc, builders.callback_body("org/other"), repository="org/other")
    assert other.status_code == 200


def test_unreadable_rate_limit_counter_answers_503_not_a_silent_pass(client, oidc, backend):
    with mock.patch("hud.ingestion.admission.take_rate_token", side_effect=DatabaseError("down")):
        response = post(client, oidc, builders.callback_body())
    assert_error(response, 503, "unavailable")
    assert response["Retry-After"]
    assert Job.objects.count() == 0


# --- Body validation ------------------------------------------------------------------------


def test_invalid_json_is_400(client, oidc, backend):
    assert_error(post(client, oidc, b"{not json"), 400, "invalid_json")


def test_invalid_utf8_is_400(client, oidc, backend):
    assert_error(post(client, oidc, b'{"delivery_id": "\xff\xfe"}'), 400, "invalid_json")


def test_deeply_nested_json_is_400_not_a_crash(client, oidc, backend):
    assert_error(post(client, oidc, b"[" * 100_000 + b"]" * 100_000), 400, "invalid_json")


@pytest.mark.parametrize(
    "path",
    [
        "delivery_id",
        "workflow.status",
        "workflow.name",
        "workflow.run_id",
        "workflow.job_name",
        "workflow.url",
    ],
)
def test_each_required_field_missing_is_400_naming_it(client, oidc, backend, path):
    body = builders.callback_body()
    container, _, key = path.rpartition(".")
    del (body[container] if container else body)[key]
    assert_error(post(client, oidc, body), 400, "missing_field", path)
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("workflow.status", "queued"),
        ("workflow.run_id", "12ab"),
        ("workflow.run_attempt", "-1"),
        ("workflow.job_name", "x" * 256),
        ("workflow.started_at", "yesterday"),
        ("workflow.schema_version", "2"),
        ("workflow.failed_tests", "not a list"),
        ("workflow.test_results", [1, 2]),
        ("workflow.artifact_url", "javascript:alert(1)"),
        ("event_type", "issue_comment"),
    ],
)
def test_malformed_field_is_400_naming_it(client, oidc, backend, path, value):
    body = builders.callback_body()
    container, _, key = path.rpartition(".")
    (body[container] if container else body)[key] = value
    assert_error(post(client, oidc, body), 400, "invalid_body", path)


def test_completed_without_conclusion_is_400(client, oidc, backend):
    body = builders.callback_body(status="completed", conclusion=None)
    assert_error(post(client, oidc, body), 400, "missing_field", "workflow.conclusion")


def test_unknown_conclusion_is_400(client, oidc, backend):
    body = builders.callback_body(status="completed", conclusion="exploded")
    assert_error(post(client, oidc, body), 400, "invalid_body", "workflow.conclusion")


def test_workflow_url_of_another_repository_is_400(client, oidc, backend):
    body = builders.callback_body()
    body["workflow"]["url"] = "https://github.com/evil/repo/actions/runs/555"
    assert_error(post(client, oidc, body), 400, "invalid_body", "workflow.url")


def test_workflow_url_of_another_run_is_400(client, oidc, backend):
    body = builders.callback_body()
    body["workflow"]["url"] = f"https://github.com/{REPO}/actions/runs/999"
    assert_error(post(client, oidc, body), 400, "invalid_body", "workflow.url")


def test_numbers_may_arrive_as_numbers_or_strings(client, oidc, backend):
    body = builders.callback_body()
    body["workflow"]["run_id"] = 555
    body["workflow"]["run_attempt"] = 1
    assert post(client, oidc, body).json()["status"] == "created"
    assert Job.objects.get().run_id == 555


def test_missing_check_run_id_is_derived_from_run_id_and_attempt(client, oidc, backend):
    body = builders.callback_body(run_id=77, run_attempt=2)
    del body["workflow"]["check_run_id"]
    post(client, oidc, body)
    assert Job.objects.get().check_run_id == "77-2"


# --- What the body may not decide ----------------------------------------------------------


def test_body_claiming_another_sha_than_its_known_delivery_is_400(client, oidc, backend):
    builders.delivery()
    body = builders.callback_body(payload=builders.pr_payload(sha="c" * 40))
    assert_error(
        post(client, oidc, body), 400, "contradicts_delivery", "payload.pull_request.head.sha"
    )
    assert Job.objects.count() == 0


def test_body_claiming_another_pr_than_its_known_delivery_is_400(client, oidc, backend):
    builders.delivery()
    body = builders.callback_body(payload=builders.pr_payload(number=99))
    assert_error(
        post(client, oidc, body), 400, "contradicts_delivery", "payload.pull_request.number"
    )
    assert Job.objects.count() == 0


def test_unknown_delivery_is_stored_unverified(client, oidc, backend):
    post(client, oidc, builders.callback_body(delivery_id="never-seen"))
    job = Job.objects.get()
    assert job.verified is False
    assert job.queue_seconds is None


def test_nightly_self_report_takes_its_sha_from_the_payload(client, oidc, backend):
    sha = "d" * 40
    body = builders.callback_body(
        status="completed",
        conclusion="success",
        event_type="nightly",
        delivery_id=sha,
        payload={"repository": {"full_name": "pytorch/pytorch"}, "head_sha": sha},
    )
    assert post(client, oidc, body).json()["status"] == "created"
    job = Job.objects.get()
    assert (job.event_type, job.head_sha, job.pr_number) == ("nightly", sha, 0)


def test_push_takes_its_sha_from_after(client, oidc, backend):
    sha = "e" * 40
    body = builders.callback_body(
        event_type="push",
        payload={
            "ref": "refs/heads/main",
            "after": sha,
            "repository": {"full_name": "pytorch/pytorch"},
        },
    )
    post(client, oidc, body)
    assert Job.objects.get().head_sha == sha


# --- State outcomes ---------------------------------------------------------------------


def completed(**extra):
    """A completed callback for the default job."""
    return builders.callback_body(status="completed", **{"conclusion": "success", **extra})


def test_completed_first_is_created_with_queue_time_unknown(client, oidc, backend):
    response = post(client, oidc, completed())
    assert response.json()["status"] == "created"
    job = Job.objects.get()
    assert (job.status, job.conclusion, job.queue_seconds, job.execution_seconds) == (
        "completed",
        "success",
        None,
        None,
    )


def test_same_in_progress_again_is_duplicate(client, oidc, backend):
    post(client, oidc, builders.callback_body())
    response = post(client, oidc, builders.callback_body())
    assert response.json()["status"] == "duplicate"
    assert Job.objects.count() == 1


def test_same_completed_again_is_duplicate_and_first_write_wins(client, oidc, backend):
    post(client, oidc, completed(test_results={"passed": 1, "failed": 0, "skipped": 0, "total": 1}))
    response = post(
        client, oidc, completed(test_results={"passed": 9, "failed": 0, "skipped": 0, "total": 9})
    )
    assert response.json()["status"] == "duplicate"
    assert Job.objects.get().tests_passed == 1


def test_in_progress_after_completed_is_stale_and_only_fills_empty_fields(client, oidc, backend):
    post(client, oidc, completed())
    response = post(client, oidc, builders.callback_body())
    assert response.json()["status"] == "stale"
    job = Job.objects.get()
    assert job.status == "completed"
    assert job.reported_started_at is not None


def test_different_conclusion_after_a_real_completion_is_409_and_changes_nothing(
    client, oidc, backend
):
    post(client, oidc, completed())
    response = post(client, oidc, completed(conclusion="failure"))
    assert_error(response, 409, "conflict", "workflow.conclusion")
    assert Job.objects.get().conclusion == "success"


def test_real_completion_replaces_the_sweepers_timed_out(client, oidc, backend, frozen_clock):
    from hud.ingestion.ingest import sweep_zombies

    post(client, oidc, builders.callback_body())
    frozen_clock.advance(hours=7)
    assert sweep_zombies() == 1
    assert Job.objects.get().conclusion == "timed_out"
    response = post(client, oidc, completed(conclusion="failure"))
    assert response.json()["status"] == "updated"
    job = Job.objects.get()
    assert (job.conclusion, job.closed_by_sweeper) == ("failure", False)
    assert job.execution_seconds == 7 * 3600


def test_rerun_attempt_is_its_own_row(client, oidc, backend):
    post(client, oidc, completed(conclusion="failure"))
    post(
        client,
        oidc,
        builders.callback_body(status="completed", conclusion="success", run_attempt=2),
    )
    assert sorted(Job.objects.values_list("run_attempt", "conclusion")) == [
        (1, "failure"),
        (2, "success"),
    ]


def test_queue_time_is_only_measured_for_the_first_attempt(client, oidc, backend, frozen_clock):
    builders.dispatch(builders.delivery(), backend)
    frozen_clock.advance(hours=2)
    post(client, oidc, builders.callback_body(run_attempt=2))
    assert Job.objects.get().queue_seconds is None


# --- Caps -------------------------------------------------------------------------------


def test_more_than_1000_failed_tests_keeps_the_first_1000_and_marks_truncation(
    client, oidc, backend
):
    tests = [
        {
            "name": f"test_{index}",
            "classname": "TestOps",
            "message": "m" * 5000,
            "stacktrace": "s" * 9000,
            "duration": 0.5,
        }
        for index in range(3)
    ]
    tests += [{"name": f"test_{index}", "classname": "TestOps"} for index in range(3, 1005)]
    response = post(client, oidc, completed(conclusion="failure", failed_tests=tests))
    assert response.json()["status"] == "created"
    job = Job.objects.get()
    assert job.failed_tests_truncated is True
    assert FailedTest.objects.count() == 1000
    stored = FailedTest.objects.order_by("id").first()
    assert (stored.name, len(stored.message), len(stored.stacktrace)) == ("test_0", 1024, 4096)


def test_failed_test_without_a_name_is_400_naming_its_index(client, oidc, backend):
    tests = [{"name": "ok"}, {"classname": "TestOps"}]
    response = post(client, oidc, completed(conclusion="failure", failed_tests=tests))
    assert_error(response, 400, "missing_field", "workflow.failed_tests[1].name")
    assert FailedTest.objects.count() == 0


def test_structurally_invalid_triage_verdict_is_dropped_whole_not_half_kept(client, oidc, backend):
    verdict = {
        "schema_version": "1",
        "category": "backend",
        "confidence": "high",
        "summary": "x",
        "suspected_upstream": {"pr": 1},
    }
    post(client, oidc, completed(conclusion="failure", triage_verdict=verdict))
    assert Job.objects.get().triage_verdict is None


def test_long_triage_verdict_text_is_truncated_and_kept(client, oidc, backend):
    verdict = {
        "schema_version": "1",
        "category": "upstream",
        "confidence": "medium",
        "summary": "é" * 2000,
        "suspected_upstream": {"pr": "123", "commit": "abc"},
        "evidence": [f"line {index}" for index in range(15)],
    }
    post(client, oidc, completed(conclusion="failure", triage_verdict=verdict))
    stored = Job.objects.get().triage_verdict
    assert len(stored["summary"].encode()) <= 1024
    assert len(stored["evidence"]) == 10
    assert stored["suspected_upstream"]["pr"] == 123


def test_nul_character_is_400_naming_the_field_and_nothing_is_stored(client, oidc, backend):
    tests = [{"name": "test_ok", "message": "bad\u0000byte"}]
    response = post(client, oidc, completed(conclusion="failure", failed_tests=tests))
    assert_error(response, 400, "invalid_body", "workflow.failed_tests[0].message")
    assert not Job.objects.exists()
    assert not FailedTest.objects.exists()


def test_completed_at_in_the_future_is_clamped_to_receipt(client, oidc, backend, frozen_clock):
    body = completed()
    body["workflow"]["completed_at"] = (frozen_clock() + dt.timedelta(days=3)).isoformat()
    post(client, oidc, body)
    assert Job.objects.get().reported_completed_at == frozen_clock()


# --- A token is spent exactly when its result is stored or definitively refused -----------


def post_with(client, token, body):
    """Send `body` under a given bearer token (to send one token more than once)."""
    return client.post(
        URL, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def test_a_token_whose_result_met_a_503_is_still_usable(client, oidc, backend):
    token = oidc.mint(REPO)
    with mock.patch("hud.ingestion.ingest._insert_job", side_effect=DatabaseError("down")):
        assert_error(post_with(client, token, builders.callback_body()), 503, "unavailable")
    assert Job.objects.count() == 0

    retried = post_with(client, token, builders.callback_body())
    assert retried.json()["status"] == "created"
    assert post_with(client, token, builders.callback_body()).status_code == 401


def test_a_token_whose_worker_crashed_mid_store_is_still_usable(client, oidc, backend):
    token = oidc.mint(REPO)
    with (
        mock.patch("hud.ingestion.ingest._store_failed_tests", side_effect=SystemExit("killed")),
        pytest.raises(SystemExit),
    ):
        post_with(client, token, completed(failed_tests=[{"name": "test_a"}]))
    assert Job.objects.count() == 0

    retried = post_with(client, token, completed(failed_tests=[{"name": "test_a"}]))
    assert retried.json()["status"] == "created"
    assert FailedTest.objects.count() == 1


def test_a_token_refused_with_429_is_usable_once_the_bucket_refills(
    client, oidc, backend, settings, frozen_clock
):
    settings.CRCR_RATE_LIMIT_PER_MIN = 1
    for run_id in (1, 2):
        assert post(client, oidc, builders.callback_body(run_id=run_id)).status_code == 200
    token = oidc.mint(REPO)
    assert_error(post_with(client, token, builders.callback_body(run_id=3)), 429, "rate_limited")

    frozen_clock.advance(seconds=60)
    assert post_with(client, token, builders.callback_body(run_id=3)).json()["status"] == "created"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (builders.callback_body(run_id="not-a-number"), 400),
        (completed(conclusion="failure"), 409),
    ],
)
def test_a_token_definitively_refused_is_spent(client, oidc, backend, body, status):
    post(client, oidc, completed())
    token = oidc.mint(REPO)
    assert post_with(client, token, body).status_code == status

    assert_error(post_with(client, token, builders.callback_body(run_id=77)), 401, "invalid_token")
    assert Job.objects.count() == 1


def test_a_token_of_a_repository_not_allowlisted_is_spent(client, oidc, backend):
    token = oidc.mint("org/unknown")
    assert_error(
        post_with(client, token, builders.callback_body("org/unknown")), 403, "not_allowlisted"
    )

    assert_error(
        post_with(client, token, builders.callback_body("org/unknown")), 401, "invalid_token"
    )
