"""`/api/v1/jobs?format=csv|ndjson`: the JSON list's rows, streamed from the database's cursor."""

import csv
import datetime as dt
import io
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework import fields

from api import exports
from api.renderers import escape_cell
from api.serializers import JobSerializer, JobVerdictSerializer
from hud.models import Downstream, Job, Level
from tests.support import builders

FILTERS = [
    {},
    {"conclusion": "failure"},
    {"downstream": "org/b", "status": "completed"},
    {"since": "2026-10-02", "job_name": "=formula"},
    {"downstream": "nobody/here"},
]


@pytest.fixture
def backends(db, frozen_clock) -> list[Downstream]:
    """An L2 and an L4 backend."""
    return [builders.downstream("org/a", Level.L2), builders.downstream("org/b", Level.L4)]


def add_jobs(backends: list[Downstream], count: int, start: int = 0) -> None:
    """`count` attempts over the backends: nulls, in-progress rows, microseconds, JSON."""
    begin = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
    jobs = []
    for index in range(start, start + count):
        at = begin + dt.timedelta(hours=index, microseconds=index * 1230)
        done = index % 5 != 0
        jobs.append(
            Job(
                downstream=backends[index % 2],
                delivery_id=f"d-{index}",
                workflow_name="crcr",
                job_name=("build", "=formula", "tést ✓", "-1")[index % 4],
                check_run_id=str(index),
                event_type=("pull_request", "push")[index % 2],
                pr_number=1000 + index if index % 2 == 0 else 0,
                head_sha=f"{index:040x}",
                source=Job.Source.CALLBACK,
                run_id=index,
                workflow_url=f"https://github.com/org/a/actions/runs/{index}",
                status=Job.Status.COMPLETED if done else Job.Status.IN_PROGRESS,
                conclusion=("success" if index % 3 else "failure") if done else "",
                placed_at=at,
                updated_at=at,
                in_progress_received_at=at,
                completed_received_at=at + dt.timedelta(minutes=20) if done else None,
                queue_seconds=60.5 if done else None,
                execution_seconds=1200.0 if done else None,
                tests_passed=1000 if done else None,
                tests_failed=0 if index % 3 else 3,
                triage_verdict={"kind": "infra", "note": "=1+1"} if index % 7 == 0 else None,
            )
        )
    Job.objects.bulk_create(jobs)


@pytest.fixture
def jobs(backends):
    """Twenty-four attempts (see add_jobs)."""
    add_jobs(backends, 24)


def json_list(client, filters: dict) -> list[dict]:
    """Every row of the paginated JSON list for `filters`."""
    body = client.get("/api/v1/jobs", {**filters, "page_size": 1000}).json()
    assert body["next"] is None
    return body["results"]


def streamed(response) -> str:
    """The text of a streamed export."""
    assert response.status_code == 200
    assert response.streaming
    return b"".join(response.streaming_content).decode("utf-8")


def ndjson_rows(client, filters: dict) -> list[dict]:
    """The rows of the NDJSON export for `filters`."""
    response = client.get("/api/v1/jobs", {**filters, "format": "ndjson"})
    assert response["Content-Type"] == "application/x-ndjson"
    assert "jobs.ndjson" in response["Content-Disposition"]
    return [json.loads(line) for line in streamed(response).splitlines()]


def csv_table(client, filters: dict) -> list[list[str]]:
    """The rows of the CSV export for `filters`, header first."""
    response = client.get("/api/v1/jobs", {**filters, "format": "csv"})
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(streamed(response))))


@pytest.mark.parametrize("filters", FILTERS)
def test_ndjson_export_is_the_json_list_row_for_row(client, jobs, filters):
    expected = json_list(client, filters)

    assert ndjson_rows(client, filters) == expected
    assert filters or len(expected) == 24


@pytest.mark.parametrize("filters", FILTERS)
def test_csv_export_is_the_json_list_row_for_row_with_formulas_escaped(client, jobs, filters):
    expected = json_list(client, filters)

    header, *table = csv_table(client, filters)

    assert header == list(JobSerializer().fields)
    assert table == [[escape_cell(row[column]) for column in header] for row in expected]


def test_in_progress_rows_and_nulls_export_as_the_list_shows_them(client, jobs):
    (row,) = ndjson_rows(client, {"job_name": "build", "status": "in_progress", "pr": 1000})

    assert row["conclusion"] is None
    assert row["completed_received_at"] is None
    assert row["placed_at"] == "2026-10-01T00:00:00Z"
    assert row["level"] == "L2"
    assert row["triage_verdict"] == {"kind": "infra", "note": "=1+1"}


@pytest.mark.parametrize("export_format", ["csv", "ndjson"])
def test_exports_stop_at_the_row_cap_with_the_lists_first_rows(
    client, jobs, monkeypatch, export_format
):
    monkeypatch.setattr("api.views.CSV_ROW_CAP", 5)
    first = [row["id"] for row in json_list(client, {})][:5]

    if export_format == "csv":
        header, *table = csv_table(client, {})
        ids = [int(row[header.index("id")]) for row in table]
    else:
        ids = [row["id"] for row in ndjson_rows(client, {})]

    assert ids == first


@pytest.mark.parametrize("export_format", ["csv", "ndjson"])
def test_export_queries_do_not_grow_with_rows_or_chunks(
    client, backends, monkeypatch, export_format
):
    # Chunks of 4 rows: 3 rows are one chunk, 40 rows ten; still one query (on PostgreSQL one
    # named cursor, fetched chunk by chunk).
    monkeypatch.setattr(exports, "EXPORT_CHUNK", 4)
    add_jobs(backends, 3)
    with CaptureQueriesContext(connection) as few:
        assert len(streamed(client.get("/api/v1/jobs", {"format": export_format}))) > 0
    add_jobs(backends, 37, start=3)
    with CaptureQueriesContext(connection) as many:
        text = streamed(client.get("/api/v1/jobs", {"format": export_format}))

    assert text.count("\n") == 40 + (export_format == "csv")
    assert len(many) == len(few) <= 2


def test_ndjson_export_by_accept_header(client, jobs):
    response = client.get("/api/v1/jobs", HTTP_ACCEPT="application/x-ndjson")

    assert len(streamed(response).splitlines()) == 24


@pytest.mark.parametrize("export_format", ["csv", "ndjson"])
@pytest.mark.parametrize(
    ("query", "field"),
    [("since=yesterday", "since"), ("pr=-1", "pr"), ("conclusion=maybe", "conclusion")],
)
def test_bad_export_filters_are_a_400_naming_the_field(client, jobs, export_format, query, field):
    response = client.get(f"/api/v1/jobs?format={export_format}&{query}")

    assert response.status_code == 400
    assert not response.streaming
    assert field in response.content.decode()
    if export_format == "ndjson":
        body = json.loads(response.content)
        assert (body["ok"], body["field"]) == (False, field)


def test_the_paginated_list_is_unchanged_by_exports(client, jobs):
    body = client.get("/api/v1/jobs", {"page_size": 10}).json()

    assert body["count"] == 24
    assert len(body["results"]) == 10
    assert body["next"] is not None


def test_a_nested_or_computed_field_cannot_be_exported():
    with pytest.raises(TypeError, match="failed_tests"):
        exports.columns(JobVerdictSerializer)


def test_schema_documents_the_ndjson_export(client, db):
    schema = client.get("/api/schema/?format=json").json()

    parameters = schema["paths"]["/api/v1/jobs"]["get"]["parameters"]
    (fmt,) = [parameter for parameter in parameters if parameter["name"] == "format"]
    assert fmt["schema"]["enum"] == ["csv", "json", "ndjson"]
    assert "ndjson" in fmt["description"]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("2026-12-03 16:20:58", "2026-12-03T16:20:58Z"),  # SQLite, whole seconds
        ("2026-12-03 16:20:58.123456", "2026-12-03T16:20:58.123456Z"),  # SQLite
        ("2026-12-03 16:20:58.123+00", "2026-12-03T16:20:58.123000Z"),  # an offset, 26 long
        ("2026-12-03 18:20:58+02:00", "2026-12-03T16:20:58Z"),
    ],
)
def test_a_datetime_exports_as_drf_renders_it(text, shown):
    iso = exports._iso_datetime(fields.DateTimeField())
    assert iso(text) == shown
    assert fields.DateTimeField().to_representation(dt.datetime.fromisoformat(text)) == shown
