"""The versioned read API (`/api/v1/…`), its CSV export, the OpenAPI schema, health checks."""

import csv
import datetime as dt
import io
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import Job, Level
from tests.conftest import NOW
from tests.support import builders

SHA_A = "a" * 40
SHA_B = "b" * 40
SHA_C = "c" * 40
DAY = dt.timedelta(days=1)


def report(repo: str, *, at: dt.datetime, clock, **fields) -> int:
    """Store a live callback for `repo` received at `at`; return the job id."""
    clock.set(at)
    backend = builders.Downstream.objects.get(full_name=repo)
    body = builders.callback_body(repo, **fields)
    return ingest.store(backend, parse_callback(body, repo), source=Job.Source.CALLBACK).job_id


def failed_test(name: str) -> dict:
    """A failed test as the action reports it."""
    return {
        "name": name,
        "classname": "TestOps",
        "message": "assert 1 == 2",
        "stacktrace": "Traceback …",
        "duration": 0.5,
    }


@pytest.fixture
def rows(db, frozen_clock):
    """Four jobs on two backends over four days; returns their ids by label."""
    builders.downstream("org/repo", Level.L2)
    builders.downstream("other/accel", Level.L4)
    builders.downstream("gone/repo", Level.L2, delisted=True)
    ids = {
        "pr_build": report(
            "org/repo",
            at=NOW - 3 * DAY,
            clock=frozen_clock,
            delivery_id="d-pr",
            job_name="build",
            status="completed",
            conclusion="success",
        ),
        "pr_test": report(
            "org/repo",
            at=NOW - 2 * DAY,
            clock=frozen_clock,
            delivery_id="d-pr",
            job_name="test",
            status="completed",
            conclusion="failure",
            failed_tests=[failed_test("test_add"), failed_test("test_mul")],
        ),
        "push_build": report(
            "other/accel",
            at=NOW - DAY,
            clock=frozen_clock,
            delivery_id="d-push",
            job_name="build",
            event_type="push",
            payload={
                "ref": "refs/heads/main",
                "after": SHA_B,
                "repository": {"full_name": "pytorch/pytorch"},
            },
        ),
        "nightly_test": report(
            "other/accel",
            at=NOW,
            clock=frozen_clock,
            delivery_id=SHA_C,
            job_name="test",
            event_type="nightly",
            status="completed",
            conclusion="cancelled",
            payload={"repository": {"full_name": "pytorch/pytorch"}, "head_sha": SHA_C},
        ),
    }
    return ids


def job_ids(response) -> set[int]:
    """Ids of the jobs in a paginated list response."""
    assert response.status_code == 200, response.content
    return {job["id"] for job in response.json()["results"]}


def assert_error(response, status: int, field: str | None) -> dict:
    """The shared error body with `status` and `field`."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"ok", "error", "detail", "field"}
    assert body["ok"] is False
    assert body["detail"]
    assert body["field"] == field
    return body


# --- /api/v1/jobs --------------------------------------------------------------------------


def test_jobs_lists_every_attempt_newest_first(client, rows):
    response = client.get("/api/v1/jobs")

    body = response.json()
    assert body["count"] == 4
    assert [job["id"] for job in body["results"]] == [
        rows["nightly_test"],
        rows["push_build"],
        rows["pr_test"],
        rows["pr_build"],
    ]
    first = body["results"][0]
    assert first["downstream"] == "other/accel"
    assert first["level"] == "L4"
    assert first["head_sha"] == SHA_C
    assert first["conclusion"] == "cancelled"
    in_progress = body["results"][1]
    assert in_progress["status"] == "in_progress"
    assert in_progress["conclusion"] is None


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("downstream=org/repo", {"pr_build", "pr_test"}),
        ("downstream=OTHER/Accel", {"push_build", "nightly_test"}),
        (f"sha={SHA_A}", {"pr_build", "pr_test"}),
        ("sha=bbbbbbb", {"push_build"}),
        (f"sha={SHA_C.upper()[:12]}", {"nightly_test"}),
        ("pr=1234", {"pr_build", "pr_test"}),
        ("pr=0", {"push_build", "nightly_test"}),
        ("job_name=build", {"pr_build", "push_build"}),
        ("conclusion=failure", {"pr_test"}),
        ("conclusion=timed_out", set()),
        ("status=in_progress", {"push_build"}),
        ("status=completed", {"pr_build", "pr_test", "nightly_test"}),
        ("event_type=push", {"push_build"}),
        ("event_type=nightly", {"nightly_test"}),
        ("event_type=pull_request", {"pr_build", "pr_test"}),
        ("since=2026-10-31T12:00:00Z", {"pr_test", "push_build", "nightly_test"}),
        ("since=2026-11-01", {"push_build", "nightly_test"}),
        ("until=2026-11-01T12:00:00Z", {"pr_build", "pr_test"}),
        # An offset PostgreSQL itself would refuse (beyond ±15:59), read as the UTC instant.
        ("until=2026-11-02T11:47:00%2B23:47", {"pr_build", "pr_test"}),
        ("since=2026-10-31&until=2026-11-02", {"pr_test", "push_build"}),
        ("downstream=org/repo&job_name=test&conclusion=failure", {"pr_test"}),
        ("downstream=nobody/here", set()),
    ],
)
def test_jobs_filters_return_only_matching_rows(client, rows, query, expected):
    response = client.get(f"/api/v1/jobs?{query}")

    assert job_ids(response) == {rows[label] for label in expected}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("pr=abc", "pr"),
        ("pr=-1", "pr"),
        ("sha=xyz", "sha"),
        ("sha=abc12", "sha"),
        ("since=notadate", "since"),
        ("until=2026-13-45", "until"),
        ("until=0001-01-01T00:00:00%2B01:00", "until"),
        ("conclusion=bogus", "conclusion"),
        ("status=queued", "status"),
        ("event_type=tag", "event_type"),
        ("downstream=not-a-repo", "downstream"),
        ("job_name=" + "x" * 256, "job_name"),
    ],
)
def test_jobs_malformed_parameter_is_400_naming_it(client, rows, query, field):
    response = client.get(f"/api/v1/jobs?{query}")

    body = assert_error(response, 400, field)
    assert body["error"] == "invalid"
    assert field in body["detail"]


def test_jobs_pagination_follows_page_size_and_next_link(client, rows):
    first = client.get("/api/v1/jobs?page_size=3").json()

    assert first["count"] == 4
    assert len(first["results"]) == 3
    assert first["previous"] is None
    assert first["next"] is not None
    assert "page=2" in first["next"]
    assert "page_size=3" in first["next"]
    second = client.get(first["next"]).json()
    assert [job["id"] for job in second["results"]] == [rows["pr_build"]]
    assert second["next"] is None
    assert second["previous"] is not None


def test_jobs_pagination_keeps_filters_in_the_next_link(client, rows):
    first = client.get("/api/v1/jobs?downstream=org/repo&page_size=1").json()

    assert first["count"] == 2
    assert "downstream=org" in first["next"]
    second = client.get(first["next"]).json()
    assert [job["id"] for job in second["results"]] == [rows["pr_build"]]


def test_jobs_page_beyond_the_end_is_404(client, rows):
    response = client.get("/api/v1/jobs?page=9")

    assert response.status_code == 404
    assert response.json()["ok"] is False


def read_csv(response) -> list[list[str]]:
    """The rows of a streamed CSV response."""
    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Type"].startswith("text/csv")
    text = b"".join(response.streaming_content).decode("utf-8")
    return list(csv.reader(io.StringIO(text)))


def test_jobs_csv_streams_a_header_and_one_row_per_job(client, rows):
    response = client.get("/api/v1/jobs?format=csv")

    table = read_csv(response)
    header = table[0]
    assert header[:3] == ["id", "downstream", "level"]
    assert "job_name" in header
    assert "attachment" in response["Content-Disposition"]
    assert "jobs.csv" in response["Content-Disposition"]
    assert len(table) == 1 + 4
    ids = [int(row[header.index("id")]) for row in table[1:]]
    assert ids == [rows["nightly_test"], rows["push_build"], rows["pr_test"], rows["pr_build"]]


def test_jobs_csv_honours_filters(client, rows):
    table = read_csv(client.get("/api/v1/jobs?format=csv&conclusion=failure"))

    assert len(table) == 2
    assert table[1][table[0].index("id")] == str(rows["pr_test"])


def test_jobs_csv_with_no_rows_still_has_a_header(client, rows):
    table = read_csv(client.get("/api/v1/jobs?format=csv&downstream=nobody/here"))

    assert len(table) == 1
    assert table[0][0] == "id"


@pytest.mark.parametrize(
    "name", ['=HYPERLINK("http://evil.example","x")', "+cmd", "@SUM(1)", "-2+3"]
)
def test_jobs_csv_escapes_formula_cells_with_a_leading_quote(client, rows, frozen_clock, name):
    job_id = report(
        "org/repo",
        at=NOW + DAY,
        clock=frozen_clock,
        delivery_id="d-evil",
        job_name=name,
        status="completed",
        conclusion="success",
    )

    table = read_csv(client.get("/api/v1/jobs?format=csv"))

    header = table[0]
    row = next(row for row in table[1:] if row[header.index("id")] == str(job_id))
    assert row[header.index("job_name")] == "'" + name
    # JSON keeps the name as reported.
    json_jobs = client.get("/api/v1/jobs", {"job_name": name}).json()["results"]
    assert [(job["id"], job["job_name"]) for job in json_jobs] == [(job_id, name)]


def test_jobs_query_count_does_not_grow_with_rows(client, db, frozen_clock):
    builders.downstream("org/repo", Level.L2)
    builders.downstream("other/accel", Level.L3)

    def add_jobs(start: int, count: int) -> None:
        for n in range(start, start + count):
            report(
                "org/repo" if n % 2 else "other/accel",
                at=NOW + dt.timedelta(minutes=n),
                clock=frozen_clock,
                delivery_id=f"d-{n}",
                status="completed",
                conclusion="failure",
                failed_tests=[failed_test(f"test_{n}")],
            )

    add_jobs(0, 3)
    with CaptureQueriesContext(connection) as few:
        assert client.get("/api/v1/jobs").json()["count"] == 3
    add_jobs(3, 27)
    with CaptureQueriesContext(connection) as many:
        assert client.get("/api/v1/jobs").json()["count"] == 30

    assert len(many) == len(few)


# --- /api/v1/prs/<n> and /api/v1/commits/<sha> -----------------------------------------------


def test_pr_returns_its_jobs_with_failed_tests(client, rows):
    response = client.get("/api/v1/prs/1234")

    assert response.status_code == 200
    body = response.json()
    assert body["pr_number"] == 1234
    assert [job["id"] for job in body["jobs"]] == [rows["pr_test"], rows["pr_build"]]
    failing = body["jobs"][0]
    assert [test["name"] for test in failing["failed_tests"]] == ["test_add", "test_mul"]
    assert failing["failed_tests"][0]["message"] == "assert 1 == 2"
    assert body["jobs"][1]["failed_tests"] == []


@pytest.mark.parametrize("url", ["/api/v1/prs/1234", f"/api/v1/commits/{SHA_A}"])
def test_pr_and_commit_csv_is_flat_one_row_per_job(client, rows, url):
    table = read_csv(client.get(f"{url}?format=csv"))

    header, body = table[0], table[1:]
    by_id = {int(row[header.index("id")]): dict(zip(header, row, strict=True)) for row in body}
    assert set(by_id) == {rows["pr_test"], rows["pr_build"]}
    failing = by_id[rows["pr_test"]]
    assert failing["failed_test_count"] == "2"
    assert failing["failed_tests"].endswith("::test_add; " + failing["failed_tests"].split("; ")[1])
    assert by_id[rows["pr_build"]]["failed_tests"] == ""
    assert {"downstream", "job_name", "conclusion", "verdict", "head_sha"} <= set(header)
    assert "verdict_evidence" not in header
    assert not any(cell.startswith(("{", "[")) for row in body for cell in row)
    if "prs" in url:
        assert "pr_title" in header


def test_unknown_pr_is_404_with_the_error_body(client, rows):
    body = assert_error(client.get("/api/v1/prs/999999"), 404, None)

    assert body["error"] == "not_found"
    assert "999999" in body["detail"]


def test_pr_query_count_does_not_grow_with_rows(client, db, frozen_clock):
    builders.downstream("org/repo", Level.L2)

    def add_jobs(start: int, count: int) -> None:
        for n in range(start, start + count):
            report(
                "org/repo",
                at=NOW + dt.timedelta(minutes=n),
                clock=frozen_clock,
                delivery_id=f"d-{n}",
                job_name=f"job-{n}",
                status="completed",
                conclusion="failure",
                failed_tests=[failed_test(f"test_{n}_a"), failed_test(f"test_{n}_b")],
            )

    add_jobs(0, 3)
    with CaptureQueriesContext(connection) as few:
        assert len(client.get("/api/v1/prs/1234").json()["jobs"]) == 3
    add_jobs(3, 27)
    with CaptureQueriesContext(connection) as many:
        assert len(client.get("/api/v1/prs/1234").json()["jobs"]) == 30

    assert len(many) == len(few)


@pytest.mark.parametrize("sha", [SHA_A, SHA_A[:7], SHA_A.upper()])
def test_commit_returns_its_jobs_with_failed_tests(client, rows, sha):
    response = client.get(f"/api/v1/commits/{sha}")

    assert response.status_code == 200
    body = response.json()
    assert body["sha"] == sha.lower()
    assert {job["id"] for job in body["jobs"]} == {rows["pr_build"], rows["pr_test"]}
    failing = next(job for job in body["jobs"] if job["id"] == rows["pr_test"])
    assert len(failing["failed_tests"]) == 2


def test_unknown_commit_is_404_with_the_error_body(client, rows):
    body = assert_error(client.get(f"/api/v1/commits/{'f' * 40}"), 404, None)

    assert body["error"] == "not_found"


def test_malformed_commit_sha_is_400_naming_it(client, rows):
    assert_error(client.get("/api/v1/commits/xyz"), 400, "sha")


# --- /api/v1/backends/ -------------------------------------------------------------------------


def test_backends_lists_listed_backends_with_their_last_result(client, rows):
    response = client.get("/api/v1/backends/")

    assert response.status_code == 200
    results = response.json()["results"]
    assert [backend["full_name"] for backend in results] == ["other/accel", "org/repo"]
    by_name = {backend["full_name"]: backend for backend in results}
    assert by_name["other/accel"]["level"] == "L4"
    assert by_name["org/repo"]["level"] == "L2"
    assert _parse(by_name["other/accel"]["last_result_at"]) == NOW
    assert _parse(by_name["org/repo"]["last_result_at"]) == NOW - 2 * DAY
    assert by_name["org/repo"]["url"] == "/crcr/org/repo"


def test_backend_without_results_has_null_last_result(client, db):
    builders.downstream("quiet/repo", Level.L2)

    results = client.get("/api/v1/backends/").json()["results"]

    assert len(results) == 1
    assert results[0]["full_name"] == "quiet/repo"
    assert results[0]["last_result_at"] is None


def test_backend_detail_returns_one_backend(client, rows):
    response = client.get("/api/v1/backends/other/accel/")

    assert response.status_code == 200
    body = response.json()
    assert body["full_name"] == "other/accel"
    assert body["level"] == "L4"
    assert _parse(body["last_result_at"]) == NOW


def test_unknown_backend_is_404_with_the_error_body(client, rows):
    body = assert_error(client.get("/api/v1/backends/nobody/here/"), 404, None)

    assert body["error"] == "not_found"
    assert "nobody/here" in body["detail"]


def test_backends_csv_export(client, rows):
    table = read_csv(client.get("/api/v1/backends/?format=csv"))

    assert table[0][0] == "full_name"
    assert [row[0] for row in table[1:]] == ["other/accel", "org/repo"]


def _parse(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


# --- schema, docs, health ----------------------------------------------------------------------


def test_schema_is_an_openapi_document_with_the_jobs_path(client, db):
    response = client.get("/api/schema/")

    assert response.status_code == 200
    text = response.content.decode()
    assert "openapi:" in text or '"openapi"' in text
    assert "/api/v1/jobs" in text
    assert "/api/v1/prs/{number}" in text


def test_docs_page_loads_without_any_cdn(client, db):
    response = client.get("/api/docs/")

    assert response.status_code == 200
    html = response.content.decode().lower()
    assert "swagger" in html
    for cdn in ("cdn.", "unpkg", "jsdelivr", "cdnjs"):
        assert cdn not in html


def test_docs_assets_are_served_by_this_server(client, db):
    html = client.get("/api/docs/").content.decode()
    assets = re.findall(r'(?:href|src)="([^"]+)"', html)

    assert any(asset.endswith(".js") for asset in assets)
    for asset in assets:
        assert asset.startswith("/static/"), asset
        assert client.get(asset).status_code == 200, asset


def test_healthz_answers_without_the_database(client):
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"ok": True}


def test_readyz_checks_the_database(client, db):
    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.json() == {"ok": True, "database": "ok"}


def test_schema_lists_the_ingestion_endpoints_with_their_auth_and_no_lock_on_reads(client, db):
    schema = client.get("/api/schema/?format=json").json()

    expected = {
        "/github/webhook": "webhookSignature",
        "/github/callback": "githubOidc",
        "/api/crcr/results": "relayBotKey",
    }
    for path, scheme in expected.items():
        operation = schema["paths"][path]["post"]
        assert operation["security"] == [{scheme: []}]
        assert scheme in schema["components"]["securitySchemes"]
        assert "401" in operation["responses"] and "413" in operation["responses"]
    reads = [
        operation
        for path, operations in schema["paths"].items()
        if path.startswith("/api/v1/")
        for operation in operations.values()
    ]
    assert reads and all("security" not in operation for operation in reads)
    assert "cookieAuth" not in schema["components"]["securitySchemes"]
