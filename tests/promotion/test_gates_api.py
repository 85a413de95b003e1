"""`GET /api/v1/backends/<org>/<repo>/gates[?as_of=]`: the gate evaluation, read-only."""

import datetime as dt
import json

import pytest

from hud import promotion
from hud.models import Level
from tests.promotion import UTC, admin, backend, criterion, report_at

pytestmark = pytest.mark.django_db

URL = "/api/v1/backends/org/npu/gates"


@pytest.fixture
def npu(frozen_clock):
    """org/npu at L2 since August: 12 jobs in late September, 24 from late October."""
    item = backend("org/npu", Level.L2, since=dt.datetime(2026, 8, 1, tzinfo=UTC))
    report_at(frozen_clock, item, dt.datetime(2026, 9, 20, tzinfo=UTC), 12, dt.timedelta(hours=20))
    report_at(frozen_clock, item, dt.datetime(2026, 10, 20, tzinfo=UTC), 22, dt.timedelta(hours=13))
    report_at(
        frozen_clock,
        item,
        dt.datetime(2026, 10, 28, 1, tzinfo=UTC),
        2,
        dt.timedelta(hours=1),
        "failure",
    )
    return item


def test_gates_lists_every_criterion_with_numbers_and_a_decision(npu, client):
    response = client.get(URL)
    assert response.status_code == 200
    body = response.json()
    assert body["current_level"] == "L2" and body["target_level"] == "L3"
    assert body["effective_level"] == "L2"
    assert body["decision"] in ("eligible", "not_eligible", "insufficient_data")
    assert body["as_of"] == "2026-11-02T12:00:00+00:00"
    assert body["demotion_decision"] == "keep"
    names = [item["name"] for item in body["criteria"]]
    assert names[:3] == ["one_month_at_level", "two_weeks_of_data", "job_pass_rate"]
    for item in body["criteria"]:
        for key in ("value", "low", "high", "threshold", "direction", "n", "status"):
            assert key in item, (item["name"], key)
        assert item["status"] in ("pass", "fail", "insufficient_data")
    rate = criterion(body, "job_pass_rate")
    assert rate["n"] == 24 and rate["value"] == pytest.approx(22 / 24)
    assert rate["low"] < rate["value"] < rate["high"]
    assert (rate["direction"], rate["threshold"]) == (">", 0.9)
    assert rate["status"] == "insufficient_data"  # n below the policy's 35
    assert criterion(body, "one_month_at_level")["status"] == "pass"
    failing = [item["name"] for item in body["criteria"] if item["status"] == "fail"]
    assert failing and body["decision"] == "not_eligible"
    assert body["failing"] == failing
    # The API is the service's evaluation, as JSON.
    assert body == json.loads(json.dumps(promotion.evaluate_backend(npu).to_dict()))


def test_as_of_evaluates_at_the_end_of_that_day(npu, client):
    now = client.get(URL).json()
    then = client.get(URL, {"as_of": "2026-10-01"})
    assert then.status_code == 200
    body = then.json()
    assert body["as_of"] == "2026-10-02T00:00:00+00:00"
    assert criterion(body, "job_pass_rate")["n"] == 12
    assert criterion(body, "job_pass_rate")["value"] == 1.0
    assert criterion(body, "job_pass_rate")["n"] < criterion(now, "job_pass_rate")["n"]
    days_then = criterion(body, "two_weeks_of_data")["value"]
    assert days_then < criterion(now, "two_weeks_of_data")["value"]
    at_level = client.get(URL, {"as_of": "2026-10-01T12:00:00Z"}).json()
    assert at_level["as_of"] == "2026-10-01T12:00:00+00:00"


@pytest.mark.parametrize("raw", ["garbage", "2026-13-45", "yesterday-ish"])
def test_bad_as_of_is_a_400_naming_the_parameter(npu, client, raw):
    response = client.get(URL, {"as_of": raw})
    assert response.status_code == 400
    body = response.json()
    assert body["ok"] is False and body["error"] == "invalid"
    assert body["field"] == "as_of"
    assert "as_of" in body["detail"]


@pytest.mark.parametrize("raw", ["2026-11-02", "2026-11-02T12:00:01Z", "2027-01-01T00:00:00"])
def test_as_of_in_the_future_is_a_400(npu, client, raw):
    # The clock is at 2026-11-02 12:00: today has not ended, so "2026-11-02" is in the future.
    response = client.get(URL, {"as_of": raw})
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "as_of" and "must not be in the future" in body["detail"]
    assert client.get(URL, {"as_of": "2026-11-02T12:00:00Z"}).status_code == 200


def test_unknown_backend_is_404(client, frozen_clock):
    response = client.get("/api/v1/backends/nobody/nothing/gates")
    assert response.status_code == 404
    assert response.json()["ok"] is False


def test_exclusions_are_shown_next_to_the_numbers(npu, client):
    promotion.add_exclusion(
        admin(),
        npu,
        "runner outage",
        start=dt.datetime(2026, 10, 28, 0, 30, tzinfo=UTC),
        end=dt.datetime(2026, 10, 28, 2, 30, tzinfo=UTC),
    )
    body = client.get(URL).json()
    assert criterion(body, "job_pass_rate")["value"] == 1.0
    assert body["exclusions"][0]["reason"] == "runner outage"
    assert body["exclusions"][0]["excluded_attempts"] == 2


def test_the_gates_api_is_read_only(npu, client):
    client.force_login(admin())
    assert client.post(URL, {}).status_code in (403, 405)
