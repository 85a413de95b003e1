"""POST /api/crcr/results: the relay → HUD forward authenticated by the shared bot key."""

import datetime as dt
import json

import pytest
from django.urls import reverse

from hud.models import Downstream, FailedTest, Job, Level, LevelChange
from tests.conftest import NOW
from tests.support import builders

URL = "/api/crcr/results"
KEY = "k"
RAN_AT = NOW - dt.timedelta(days=3)


def iso(moment: dt.datetime) -> str:
    """A wire timestamp with a trailing Z, as the action sends it."""
    return moment.isoformat().replace("+00:00", "Z")


def completed_callback(**fields) -> dict:
    """A completed callback that ran three days before the frozen now."""
    fields.setdefault("conclusion", "success")
    return builders.callback_body(
        status="completed",
        started_at=iso(RAN_AT - dt.timedelta(minutes=10)),
        completed_at=iso(RAN_AT),
        **fields,
    )


def post(client, body, *, key: str | None = KEY, raw: bytes | None = None):
    """POST a forward body (or raw bytes) with the bot key header when `key` is given."""
    headers = {"HTTP_X_HUD_INTERNAL_BOT": key} if key is not None else {}
    data = raw if raw is not None else json.dumps(body)
    return client.post(URL, data=data, content_type="application/json", **headers)


def assert_error_body(response, status: int, field: str | None = None) -> dict:
    """The response is `status` with the shared error body; return it."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"ok", "error", "detail", "field"}
    assert body["ok"] is False
    assert body["error"]
    assert body["detail"]
    assert body["field"] == field
    return body


@pytest.fixture
def bot_key(settings):
    """The forward endpoint enabled with key "k"."""
    settings.HUD_BOT_KEY = KEY
    return KEY


def test_forward_url_is_named():
    assert reverse("forward") == URL


# --- bot key -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_forward_without_bot_key_is_401(client, bot_key, frozen_clock):
    response = post(client, builders.forward_body(completed_callback()), key=None)

    body = assert_error_body(response, 401)
    assert body["error"] == "invalid_bot_key"
    assert "missing" in body["detail"]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_forward_with_wrong_bot_key_is_401(client, bot_key, frozen_clock):
    response = post(client, builders.forward_body(completed_callback()), key="guessed-key")

    body = assert_error_body(response, 401)
    assert "wrong" in body["detail"]
    assert "guessed-key" not in body["detail"]
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("configured", [None, ""])
def test_forward_is_401_when_hud_bot_key_is_unset(client, settings, frozen_clock, configured):
    settings.HUD_BOT_KEY = configured

    response = post(client, builders.forward_body(completed_callback()), key="")
    assert_error_body(response, 401)
    response = post(client, builders.forward_body(completed_callback()), key="anything")

    body = assert_error_body(response, 401)
    assert "HUD_BOT_KEY" in body["detail"]
    assert not Job.objects.exists()


def test_forward_refuses_get(client, bot_key):
    response = client.get(URL, HTTP_X_HUD_INTERNAL_BOT=KEY)

    assert response.status_code == 405


# --- a valid forward ---------------------------------------------------------------------


@pytest.mark.django_db
def test_valid_forward_is_placed_at_receipt_and_keeps_its_reported_times(
    client, bot_key, frozen_clock
):
    builders.downstream("org/repo", Level.L2)
    callback = completed_callback(
        conclusion="failure",
        test_results={"passed": 10, "failed": 1, "skipped": 0, "total": 11},
        failed_tests=[{"name": "test_add", "classname": "TestOps", "message": "boom"}],
    )

    response = post(client, builders.forward_body(callback, queue_time=42.5, execution_time=900.0))

    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["ok"] is True
    assert answer["status"] == "created"
    job = Job.objects.get()
    assert answer["job"] == job.id
    # The body's times are untrusted: placed at receipt, the reported ones kept for display.
    assert job.placed_at == NOW
    assert job.reported_completed_at == RAN_AT
    assert job.reported_started_at == RAN_AT - dt.timedelta(minutes=10)
    assert job.queue_seconds == 42.5
    assert job.execution_seconds == 900.0
    assert job.timing_source == Job.TimingSource.FORWARD
    assert job.source == Job.Source.FORWARD
    assert job.verified is False  # no delivery known on this server
    assert job.status == Job.Status.COMPLETED
    assert job.conclusion == "failure"
    assert job.head_sha == builders.HEAD_SHA
    assert job.pr_number == 1234
    assert job.tests_failed == 1
    assert list(FailedTest.objects.values_list("name", flat=True)) == ["test_add"]


@pytest.mark.django_db
def test_forward_with_null_metrics_keeps_timing_unknown(client, bot_key, frozen_clock):
    builders.downstream("org/repo", Level.L2)
    body = builders.forward_body(completed_callback(), queue_time=None, execution_time=None)

    response = post(client, body)

    assert response.json()["status"] == "created"
    job = Job.objects.get()
    assert job.queue_seconds is None
    assert job.execution_seconds is None
    assert job.timing_source == Job.TimingSource.NONE
    assert job.placed_at == NOW


@pytest.mark.django_db
def test_forward_learns_level_of_a_new_downstream_at_receipt_not_at_the_reported_time(
    client, bot_key, frozen_clock
):
    callback = completed_callback(repo="neworg/accel")

    response = post(client, builders.forward_body(callback, repo="neworg/accel", level="L3"))

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "created"
    downstream = Downstream.objects.get(full_name="neworg/accel")
    assert downstream.level == Level.L3
    change = LevelChange.objects.get(downstream=downstream)
    assert change.to_level == Level.L3
    assert change.from_level is None
    assert change.at == NOW
    assert change.source == LevelChange.Source.FORWARD
    assert Job.objects.get().downstream == downstream


@pytest.mark.django_db
def test_forward_at_level_l1_is_ignored_and_stores_nothing(client, bot_key, frozen_clock):
    response = post(client, builders.forward_body(completed_callback(), level="L1"))

    assert response.status_code == 200
    assert response.json() == {"ok": True, "status": "ignored", "job": None}
    assert not Job.objects.exists()
    assert not Downstream.objects.exists()
    assert not LevelChange.objects.exists()


@pytest.mark.django_db
def test_duplicate_forward_is_idempotent(client, bot_key, frozen_clock):
    body = builders.forward_body(completed_callback())

    first = post(client, body)
    frozen_clock.advance(minutes=5)
    second = post(client, body)

    assert first.json()["status"] == "created"
    assert second.status_code == 200
    assert second.json() == {"ok": True, "status": "duplicate", "job": first.json()["job"]}
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_forward_in_progress_then_completed_is_updated(client, bot_key, frozen_clock):
    started = builders.callback_body(started_at=iso(RAN_AT - dt.timedelta(minutes=10)))
    first = post(client, builders.forward_body(started, queue_time=30.0, execution_time=None))

    second = post(
        client, builders.forward_body(completed_callback(), queue_time=30.0, execution_time=600.0)
    )

    assert first.json()["status"] == "created"
    assert second.json()["status"] == "updated"
    job = Job.objects.get()
    assert job.conclusion == "success"
    assert job.placed_at == NOW
    assert job.queue_seconds == 30.0
    assert job.execution_seconds == 600.0


# --- refusals ----------------------------------------------------------------------------


def _without(body: dict, *path: str) -> dict:
    target = body
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return body


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: b["trusted"].update(verified_repo="no-slash"), "trusted.verified_repo"),
        (lambda b: b["trusted"].update(verified_repo=42), "trusted.verified_repo"),
        (
            lambda b: b["trusted"].update(downstream_repo_level="L9"),
            "trusted.downstream_repo_level",
        ),
        (
            lambda b: b["trusted"]["ci_metrics"].update(queue_time="soon"),
            "trusted.ci_metrics.queue_time",
        ),
        (
            lambda b: b["trusted"]["ci_metrics"].update(queue_time=-1),
            "trusted.ci_metrics.queue_time",
        ),
        (
            lambda b: b["trusted"]["ci_metrics"].update(execution_time=True),
            "trusted.ci_metrics.execution_time",
        ),
        (lambda b: b["trusted"].update(ci_metrics=[1, 2]), "trusted.ci_metrics"),
        (lambda b: b.update(trusted="yes"), "trusted"),
        (lambda b: _without(b, "untrusted", "callback_payload"), "untrusted.callback_payload"),
        (lambda b: b.update(untrusted=None), "untrusted.callback_payload"),
        (lambda b: b["untrusted"].update(callback_payload=[]), "body"),
        (
            lambda b: _without(b, "untrusted", "callback_payload", "workflow", "job_name"),
            "workflow.job_name",
        ),
        (
            lambda b: b["untrusted"]["callback_payload"]["workflow"].update(url="http://x/y"),
            "workflow.url",
        ),
    ],
)
def test_forward_with_a_bad_field_is_400_naming_it(client, bot_key, frozen_clock, mutate, field):
    body = builders.forward_body(completed_callback())
    mutate(body)

    response = post(client, body)

    assert_error_body(response, 400, field)
    assert not Job.objects.exists()
    assert not Downstream.objects.exists()


@pytest.mark.django_db
def test_forward_body_that_is_not_an_object_is_400(client, bot_key):
    response = post(client, [1, 2, 3])

    assert_error_body(response, 400, "body")


@pytest.mark.django_db
def test_forward_with_invalid_json_is_400(client, bot_key):
    response = post(client, None, raw=b'{"trusted": ')

    body = assert_error_body(response, 400)
    assert body["error"] == "invalid_json"


@pytest.mark.django_db
def test_forward_with_invalid_utf8_is_400(client, bot_key):
    response = post(client, None, raw=b'{"trusted": "\xff"}')

    assert assert_error_body(response, 400)["error"] == "invalid_json"


@pytest.mark.django_db
def test_forward_body_over_2_mb_is_413_before_the_key_is_checked(client, bot_key, settings):
    padding = "x" * (settings.CRCR_MAX_BODY_BYTES + 1)
    raw = json.dumps({"padding": padding}).encode()

    response = post(client, None, raw=raw)
    assert_error_body(response, 413)
    response = post(client, None, raw=raw, key=None)
    assert assert_error_body(response, 413)["error"] == "body_too_large"
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_forward_body_of_exactly_2_mb_is_not_413(client, bot_key, settings, frozen_clock):
    body = builders.forward_body(completed_callback())
    raw = json.dumps(body)
    raw = raw[:-1] + " " * (settings.CRCR_MAX_BODY_BYTES - len(raw.encode())) + "}"
    assert len(raw.encode()) == settings.CRCR_MAX_BODY_BYTES

    response = post(client, None, raw=raw.encode())

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "created"


@pytest.mark.django_db
def test_forward_for_a_delisted_downstream_is_403(client, bot_key, frozen_clock):
    builders.downstream("org/repo", Level.L2, delisted=True)
    LevelChange.objects.create(
        downstream=Downstream.objects.get(),
        from_level=Level.L2,
        to_level=None,
        at=NOW,
        recorded_at=NOW,
        source=LevelChange.Source.IMPORT,
    )

    frozen_clock.set(NOW - dt.timedelta(minutes=1))  # received before the delisting
    response = post(client, builders.forward_body(completed_callback()))

    assert_error_body(response, 403)
    assert not Job.objects.exists()
    # The refused forward's level claim is not kept as history either.
    assert list(LevelChange.objects.values_list("source", flat=True)) == ["import"]


@pytest.mark.django_db
def test_forward_with_a_different_conclusion_for_the_same_attempt_is_409(
    client, bot_key, frozen_clock
):
    post(client, builders.forward_body(completed_callback(conclusion="success")))

    response = post(client, builders.forward_body(completed_callback(conclusion="failure")))

    assert_error_body(response, 409, "workflow.conclusion")
    assert Job.objects.get().conclusion == "success"
