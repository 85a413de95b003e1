"""Read endpoints behind the pages' tables: backends with figures, daily series, failed tests."""

import csv
import io
import json

import pytest

from api.serializers import DailyRowSerializer
from hud import pages, stats
from hud.reads import selectors
from tests.conftest import NOW
from tests.pages.conftest import DAY, seed_all


@pytest.fixture
def seeded(db, frozen_clock):
    """The page tests' rows (two L2+ backends, one L1, re-runs, a stuck job, a nightly)."""
    return seed_all(frozen_clock)


def rows_of_csv(response) -> list[dict]:
    """A CSV export as dicts."""
    assert response.status_code == 200
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return list(csv.DictReader(io.StringIO(body.decode())))


def test_backends_list_carries_the_summary_figures(client, seeded):
    results = client.get("/api/v1/backends/?days=7").json()["results"]

    by_name = {row["full_name"]: row for row in results}
    summary = client.get("/crcr?days=7").context["data"]
    row = next(r for r in summary.rows if r.backend.full_name == "org/repo")
    assert by_name["org/repo"]["pass_rate"] == row.pass_rate.value
    assert by_name["org/repo"]["pass_rate_low"] == row.pass_rate.low
    assert by_name["org/repo"]["counted"] == row.counts.counted
    assert by_name["org/repo"]["stuck_jobs"] == 1
    assert by_name["org/repo"]["window_days"] == 7
    assert by_name["quiet/l1"]["pass_rate"] is None


def test_backends_csv_has_the_figures_as_columns(client, seeded):
    table = rows_of_csv(client.get("/api/v1/backends/?days=7&format=csv"))

    assert {"full_name", "pass_rate", "pass_rate_n", "failures", "stale"} <= set(table[0])
    assert [row["full_name"] for row in table] == ["other/accel", "org/repo", "quiet/l1"]


@pytest.mark.parametrize("days", ["0", "91", "x"])
def test_backends_rejects_a_bad_window_naming_days(client, seeded, days):
    response = client.get(f"/api/v1/backends/?days={days}")

    assert response.status_code == 400
    assert response.json()["field"] == "days"


def test_backend_detail_stats_are_stats_backend_summary(client, seeded):
    body = client.get("/api/v1/backends/org/repo/?days=7").json()

    backend = selectors.backend("org/repo")
    frame = selectors.jobs_frame(NOW - 7 * DAY, NOW, [backend.id])
    expected = stats.backend_summary(frame, NOW - 7 * DAY, NOW, NOW)
    assert body["stats"]["job_pass_rate"] == expected["job_pass_rate"].to_dict()
    assert body["stats"]["counts"]["counted"] == expected["counts"].counted
    assert body["stats"]["stuck_jobs"] == expected["stuck_jobs"]
    assert body["full_name"] == "org/repo"


def test_daily_metrics_are_stats_daily_series(client, seeded):
    body = client.get("/api/v1/metrics/daily?downstream=org/repo&days=7").json()

    assert body["count"] == 7
    backend = selectors.backend("org/repo")
    start = (NOW - 6 * DAY).replace(hour=0)
    expected = stats.daily_series(selectors.jobs_frame(start, NOW, [backend.id]), start, NOW)
    assert [r["successes"] for r in body["results"]] == expected["successes"].tolist()
    assert [r["day"] for r in body["results"]] == [str(d) for d in expected["day"]]


@pytest.mark.parametrize(
    ("query", "names", "days", "events"),
    [
        ("days=7", ["other/accel", "org/repo"], 7, None),
        ("downstream=org/repo&days=3&event_type=push", ["org/repo"], 3, ("push",)),
    ],
)
def test_daily_metrics_body_is_what_its_documented_serializer_gives(
    client, seeded, query, names, days, events
):
    body = client.get(f"/api/v1/metrics/daily?{query}").json()

    backends = [selectors.backend(name) for name in names]
    daily = pages.daily_rows(backends, days, NOW, events)
    expected = DailyRowSerializer(pages.daily_records(daily), many=True).data
    assert body["count"] == len(body["results"]) == days * len(names)
    # As text: 3 and 3.0 are equal in Python, not on the wire.
    assert json.dumps(body["results"]) == json.dumps(expected)


def test_daily_metrics_csv_and_event_type_filter(client, seeded):
    table = rows_of_csv(
        client.get("/api/v1/metrics/daily?days=3&event_type=nightly,periodic&format=csv")
    )

    assert {row["downstream"] for row in table} == {"org/repo", "other/accel"}
    assert sum(int(row["runs"]) for row in table) == 1


@pytest.mark.parametrize(
    ("query", "status", "field"),
    [
        ("event_type=merge", 400, "event_type"),
        ("downstream=bad", 400, "downstream"),
        ("downstream=no/such", 404, None),
        ("days=100", 400, "days"),
    ],
)
def test_daily_metrics_rejects_bad_parameters(client, seeded, query, status, field):
    response = client.get(f"/api/v1/metrics/daily?{query}")

    assert response.status_code == status
    assert response.json()["field"] == field


def test_failed_tests_endpoint_ranks_like_the_page(client, seeded):
    body = client.get("/api/v1/failed-tests?downstream=org/repo&days=7").json()

    page = client.get("/crcr/org/repo?days=7").context["data"]
    assert [(r["name"], r["occurrences"]) for r in body["results"]] == [
        (t.name, t.occurrences) for t in page.failed_tests
    ]
    assert body["results"][0]["last_message"] == "assert 1 == 2"


def test_failed_tests_endpoint_needs_a_downstream(client, seeded):
    response = client.get("/api/v1/failed-tests")

    assert response.status_code == 400
    assert response.json()["field"] == "downstream"


def test_failed_tests_csv_export(client, seeded):
    table = rows_of_csv(client.get("/api/v1/failed-tests?downstream=org/repo&format=csv"))

    assert table[0]["name"] == "test_add"


@pytest.mark.parametrize("name", ["org/repo", "other/accel", "quiet/l1"])
def test_backend_detail_has_the_list_rows_shape_and_values(client, seeded, name):
    listed = {
        row["full_name"]: row for row in client.get("/api/v1/backends/?days=7").json()["results"]
    }[name]
    detail = client.get(f"/api/v1/backends/{name}/?days=7").json()

    assert list(detail) == [*listed, "stats"]
    assert {key: detail[key] for key in listed} == listed
    assert detail["effective_level"] == listed["effective_level"]
