"""Odd query strings and paths on pages and API reads: a 400 naming the parameter, never a 5xx;
an unreachable database: a 503 with Retry-After, styled for pages and JSON for the API."""

from unittest import mock

import pytest
from django.db import OperationalError

from hud.models import Level
from tests.support import builders

pytestmark = pytest.mark.django_db
REPO = "org/repo"


@pytest.fixture
def backend(frozen_clock):
    """A known backend, so its pages reach their query parsing."""
    return builders.downstream(REPO, Level.L2)


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("/crcr?days=²", "days"),
        ("/crcr?days=٣", "days"),
        (f"/crcr/{REPO}?page=²", "page"),
        (f"/crcr/{REPO}?pr=²", "pr"),
        (f"/crcr/{REPO}/tests?days=²", "days"),
        ("/crcr/metrics?backend=a%20b/c", "backend"),
        ("/crcr/metrics?backend=org/repo%0A", "backend"),
        ("/crcr?job_name=%00", "job_name"),
        ("/crcr/delivery/%00", "path"),
    ],
)
def test_page_with_an_odd_parameter_is_a_400_page_naming_it(client, backend, url, name):
    response = client.get(url)
    assert response.status_code == 400, response.content[:300]
    assert name.encode() in response.content


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/api/v1/metrics/daily?days=²", "days"),
        ("/api/v1/jobs?pr=²", "pr"),
        ("/api/v1/jobs?job_name=%00", "job_name"),
        ("/api/v1/jobs?since=0001-01-01T00:00:00%2B01:00", "since"),
        ("/api/v1/jobs?until=9999-12-31T23:59:59-01:00", "until"),
        ("/api/v1/jobs?downstream=x/%3Cscript%3E", "downstream"),
        (f"/api/v1/backends/{REPO}/gates?as_of=9999-12-31", "as_of"),
        (f"/api/v1/backends/{REPO}/tests?days=²", "days"),
    ],
)
def test_api_read_with_an_odd_parameter_is_400_naming_it(client, backend, url, field):
    response = client.get(url)
    assert response.status_code == 400, response.content[:300]
    assert response.json()["ok"] is False
    assert response.json()["field"] == field


@pytest.mark.parametrize("url", ["/crcr/pr/99999999999999999999", "/api/v1/prs/1" + "0" * 30])
def test_pr_number_longer_than_its_column_is_a_404(client, db, url):
    assert client.get(url).status_code == 404


@pytest.mark.parametrize("url", ["/crcr/pr/4294967303", "/api/v1/prs/9223372036854775807"])
def test_pr_number_within_64_bits_reads_without_error(client, db, url):
    assert client.get(url).status_code == 404  # nothing known, but no overflow


def _database_down():
    return mock.patch(
        "django.db.backends.utils.CursorWrapper.execute",
        side_effect=OperationalError("connection refused"),
    )


@pytest.mark.parametrize("url", ["/crcr", f"/crcr/{REPO}", "/crcr/pr/1", "/crcr/metrics"])
def test_page_with_the_database_unreachable_is_a_styled_503_with_retry_after(client, db, url):
    with _database_down():
        response = client.get(url)
    assert response.status_code == 503
    assert response["Retry-After"]
    assert b"Temporarily unavailable" in response.content
    assert b"hud.css" in response.content


@pytest.mark.parametrize(
    "url", ["/api/v1/backends/", "/api/v1/jobs", "/api/v1/prs/1", "/api/v1/metrics/daily"]
)
def test_api_read_with_the_database_unreachable_is_a_json_503(client, db, url):
    with _database_down():
        response = client.get(url)
    assert response.status_code == 503
    assert response["Retry-After"]
    assert response.json()["error"] == "unavailable"


def test_page_asked_for_json_with_the_database_unreachable_answers_json(client, db):
    with _database_down():
        response = client.get("/crcr", HTTP_ACCEPT="application/json")
    assert response.status_code == 503
    assert response.json()["ok"] is False
