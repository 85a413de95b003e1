"""Odd values in callback and forward bodies: a 400 naming the field, or stored exactly as sent.

Each case was reproduced against a running server (issue 17): values wrapped by 32-bit
columns, NaN and Infinity that broke every later read, lone surrogates, newlines in names,
deep nesting, huge literals, times outside datetime's range, backdated forwards.
"""

import datetime as dt
import json

import pytest

from hud import promotion
from hud.models import Downstream, FailedTest, Job, LevelChange
from tests.conftest import NOW
from tests.support import builders

pytestmark = pytest.mark.django_db
REPO = "org/repo"
KEY = "k"


@pytest.fixture
def bot_key(settings):
    """The forward endpoint enabled with key "k"."""
    settings.HUD_BOT_KEY = KEY
    return KEY


def post_callback(client, oidc, body):
    """A callback as the public action sends it (a str body is sent as raw JSON text)."""
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    return client.post(
        "/github/callback", raw, content_type="application/json", **oidc.headers(REPO)
    )


def post_forward(client, body):
    """A relay forward with the bot key (a str body is sent as raw JSON text)."""
    raw = body if isinstance(body, str) else json.dumps(body)
    return client.post(
        "/api/crcr/results", raw, content_type="application/json", HTTP_X_HUD_INTERNAL_BOT=KEY
    )


def assert_refused(response, field):
    """A 400 with the shared error body naming `field`, and nothing stored."""
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["ok"] is False
    assert body["detail"]
    assert body["field"] == field
    assert not Job.objects.exists()
    assert not FailedTest.objects.exists()


def completed(**extra):
    """A completed callback of the default job."""
    return builders.callback_body(status="completed", **{"conclusion": "success", **extra})


# --- numbers ------------------------------------------------------------------------------


def test_pr_number_beyond_32_bits_is_stored_exactly(client, oidc, backend):
    body = completed()
    body["payload"] = builders.pr_payload(number=4_294_967_303)
    assert post_callback(client, oidc, body).status_code == 200
    assert Job.objects.get().pr_number == 4_294_967_303
    assert client.get("/api/v1/prs/4294967303").status_code == 200


@pytest.mark.parametrize(
    ("number", "field"),
    [(-1, "payload.pull_request.number"), (2**63, "payload.pull_request.number")],
)
def test_pr_number_outside_the_column_is_400(client, oidc, backend, number, field):
    body = completed()
    body["payload"] = builders.pr_payload(number=number)
    assert_refused(post_callback(client, oidc, body), field)


def test_test_counts_beyond_32_bits_are_stored_exactly(client, oidc, backend):
    counts = {"passed": 10**17, "failed": 0, "skipped": 2**40, "total": 10**17 + 2**40}
    assert post_callback(client, oidc, completed(test_results=counts)).status_code == 200
    job = Job.objects.get()
    assert (job.tests_passed, job.tests_skipped, job.tests_total) == (
        10**17,
        2**40,
        10**17 + 2**40,
    )


def test_run_attempt_beyond_its_column_is_400(client, oidc, backend):
    body = completed()
    body["workflow"]["run_attempt"] = str(2**32 + 1)
    assert_refused(post_callback(client, oidc, body), "workflow.run_attempt")


def test_integer_literal_of_4300_digits_is_400_naming_the_field(client, oidc, backend):
    text = json.dumps(completed(test_results={"passed": 12345})).replace("12345", "9" * 4300)
    assert_refused(post_callback(client, oidc, text), "workflow.test_results.passed")


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_failed_test_duration_is_400(client, oidc, backend, literal):
    body = completed(conclusion="failure", failed_tests=[{"name": "t", "duration": 12345.5}])
    text = json.dumps(body).replace("12345.5", literal)
    assert_refused(post_callback(client, oidc, text), "workflow.failed_tests[0].duration")


@pytest.mark.parametrize("literal", ["Infinity", "NaN", "1e300", "-1"])
def test_forward_trusted_execution_time_out_of_range_is_400(client, bot_key, backend, literal):
    body = builders.forward_body(completed(), execution_time=12345.5)
    text = json.dumps(body).replace("12345.5", literal)
    assert_refused(post_forward(client, text), "trusted.ci_metrics.execution_time")


# --- strings and structure ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("job_name", "build-\ud800"),
        ("job_name", "build\nci"),
        ("name", "crcr\r\n"),
        ("check_run_id", "1\t2"),
    ],
)
def test_name_with_a_lone_surrogate_or_control_character_is_400(
    client, oidc, backend, field, value
):
    body = completed()
    body["workflow"][field] = value
    assert_refused(post_callback(client, oidc, body), f"workflow.{field}")


def test_lone_surrogate_in_a_failed_test_name_is_400(client, oidc, backend):
    body = completed(conclusion="failure", failed_tests=[{"name": "test_\udfff"}])
    assert_refused(post_callback(client, oidc, body), "workflow.failed_tests[0].name")


def test_failed_test_name_with_a_newline_is_stored_as_sent_and_its_pages_answer(
    client, oidc, backend, frozen_clock
):
    builders.dispatch(builders.delivery(), backend)
    name = "test_ops[case\nwith newline]"
    body = completed(conclusion="failure", failed_tests=[{"name": name, "message": "a\nb"}])
    assert post_callback(client, oidc, body).status_code == 200
    assert FailedTest.objects.get().name == name
    frozen_clock.advance(minutes=1)  # the window ends just before now
    page = client.get(f"/crcr/{REPO}/tests")
    assert page.status_code == 200
    assert b"case%0Awith" in page.content
    assert client.get(f"/crcr/{REPO}/tests/test_ops[case%0Awith newline]").status_code == 200
    api = client.get(f"/api/v1/backends/{REPO}/tests/test_ops[case%0Awith newline]")
    assert api.status_code == 200


def test_environment_nested_600_deep_is_400(client, oidc, backend):
    text = json.dumps(completed(environment={"k": "NEST"}))
    text = text.replace('"NEST"', "[" * 600 + "]" * 600)
    response = post_callback(client, oidc, text)
    assert_refused(response, response.json()["field"])
    assert response.json()["field"].startswith("workflow.environment.k[0][0]")
    assert "nested deeper than" in response.json()["detail"]


@pytest.mark.parametrize(
    "moment", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "1970-01-01T00:00:00Z"]
)
def test_time_outside_the_sane_range_is_400(client, oidc, backend, moment):
    body = builders.callback_body(started_at=moment)
    assert_refused(post_callback(client, oidc, body), "workflow.started_at")


# --- repository names -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "repo", ["evil/", "/evil", "a b/c", "x/<script>", "org/repo\n", "-org/repo", "org/.."]
)
def test_forward_verified_repo_outside_githubs_grammar_is_400(client, bot_key, frozen_clock, repo):
    body = builders.forward_body(completed(), repo=repo)
    assert_refused(post_forward(client, body), "trusted.verified_repo")
    assert not Downstream.objects.exists()


# --- times that decide levels and streaks -------------------------------------------------------


def test_backdated_forward_is_placed_and_learns_its_level_at_receipt(client, bot_key, frozen_clock):
    callback = completed(completed_at="2000-01-01T00:00:00Z", started_at="2000-01-01T00:00:00Z")
    response = post_forward(client, builders.forward_body(callback, level="L2"))
    assert response.status_code == 200, response.content
    assert LevelChange.objects.get().at == NOW
    job = Job.objects.get()
    assert job.placed_at == NOW
    assert job.reported_completed_at == dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


def test_fifteen_backdated_forwards_in_a_minute_are_not_two_weeks_of_data(
    client, bot_key, frozen_clock
):
    for day in range(15):
        ran = (NOW - dt.timedelta(days=day + 1)).isoformat().replace("+00:00", "Z")
        callback = completed(delivery_id=f"d-{day}", completed_at=ran)
        assert post_forward(client, builders.forward_body(callback)).status_code == 200
        frozen_clock.advance(seconds=3)
    statuses = criterion_statuses(promotion.evaluate_backend(Downstream.objects.get()).to_dict())
    assert statuses["two_weeks_of_data"] != "pass"
    assert statuses["one_month_at_level"] != "pass"


def criterion_statuses(value) -> dict[str, str]:
    """{criterion name: status} of every criterion anywhere in an evaluation's JSON."""
    found = {}
    if isinstance(value, dict):
        if "name" in value and "status" in value:
            found[value["name"]] = value["status"]
        for item in value.values():
            found.update(criterion_statuses(item))
    elif isinstance(value, (list, tuple)):
        for item in value:
            found.update(criterion_statuses(item))
    return found


def test_callback_with_unicode_digits_as_content_length_is_not_a_server_error(
    client, oidc, backend
):
    response = client.post(
        "/github/callback",
        b"{}",
        content_type="application/json",
        CONTENT_LENGTH="²",
        **oidc.headers(REPO),
    )
    assert response.status_code == 400  # the body is read as empty: not JSON
