"""Failure attribution in the read API: a backend's failed tests (JSON or `?format=csv`) and
one test's history. Verdicts on PRs and commits ride on `/api/v1/prs/<n>` and `/commits/<sha>`."""

import datetime as dt
from typing import Any

from django.http import Http404, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.renderers import csv_download
from hud import attribution
from hud.core import clock, inputs
from hud.models import Downstream
from hud.reads import selectors

DEFAULT_DAYS = 14
MAX_DAYS = 90
DAYS_PARAMETER = OpenApiParameter("days", int, description="window in days, 1 to 90 (14)")
CSV_COLUMNS = [
    "test",
    "classname",
    "name",
    "occurrences",
    "affected_prs",
    "first_seen",
    "last_seen",
    "jobs",
    "sha_count",
    "flake_rate",
    "flake_low",
    "flake_high",
    "flake_n",
    "failed_in",
    "flaked_in",
    "quarantine_candidate",
    "latest_message",
    "latest_job_id",
]


def _days(request: Request) -> int:
    raw = request.query_params.get("days") or ""
    if not raw:
        return DEFAULT_DAYS
    days = inputs.whole_number(raw, 1, MAX_DAYS)
    if days is None:
        raise ValidationError({"days": [f"must be a whole number from 1 to {MAX_DAYS}"]})
    return days


def _backend(org: str, repo: str) -> Downstream:
    backend = selectors.backend(f"{org}/{repo}")
    if backend is None:
        raise Http404(f"no backend {org}/{repo}")
    return backend


def test_row(item: dict[str, Any]) -> dict[str, Any]:
    """One ranked failed test as a flat row (JSON and CSV share it)."""
    estimate = item["flake"]["estimate"]
    return {
        "test": item["test"],
        "classname": item["classname"],
        "name": item["name"],
        "occurrences": item["occurrences"],
        "affected_prs": item["affected_prs"],
        "first_seen": item["first_seen"],
        "last_seen": item["last_seen"],
        "jobs": "; ".join(item["jobs"]),
        "sha_count": item["sha_count"],
        "flake_rate": estimate["value"],
        "flake_low": estimate["low"],
        "flake_high": estimate["high"],
        "flake_n": estimate["n"],
        "failed_in": item["flake"]["failed_in"],
        "flaked_in": item["flake"]["flaked_in"],
        "quarantine_candidate": item["quarantine_candidate"],
        "latest_message": item["latest_message"],
        "latest_job_id": item["latest_job_id"],
    }


class BackendTests(APIView):
    """A backend's failed tests of a window, most occurrences first, with flake rates."""

    @extend_schema(
        operation_id="backend_failed_tests",
        parameters=[DAYS_PARAMETER, OpenApiParameter("format", str, enum=["json", "csv"])],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request: Request, org: str, repo: str) -> Response | StreamingHttpResponse:
        """Ranked failed tests; `results` rows are the CSV rows."""
        backend = _backend(org, repo)
        days = _days(request)
        now = clock.now()
        start = now - dt.timedelta(days=days)
        data = attribution.failed_tests_overview(backend.id, start, now, limit=10_000)
        rows = [test_row(item) for item in data["by_occurrences"]]
        if request.accepted_renderer.format == "csv":
            return csv_download(rows, CSV_COLUMNS, f"{backend.repo}-tests")
        return Response(
            {
                "downstream": backend.full_name,
                "start": start.isoformat(),
                "end": now.isoformat(),
                "policy": data["policy"],
                "quarantine": [item["test"] for item in data["quarantine"]],
                "results": rows,
            }
        )


class BackendTestHistory(APIView):
    """One failed test's history on a backend, newest first, with its flake rate."""

    @extend_schema(
        operation_id="backend_failed_test_history",
        parameters=[DAYS_PARAMETER],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request: Request, org: str, repo: str, test: str) -> Response:
        """Failures of `test` (classname::name) in the window; 404 when none."""
        backend = _backend(org, repo)
        days = _days(request)
        now = clock.now()
        data = attribution.failed_test_history(backend.id, test, now - dt.timedelta(days=days), now)
        if data is None:
            raise Http404(f"{test} did not fail on {backend.full_name} in the last {days} days")
        return Response(
            {**data, "start": data["start"].isoformat(), "end": data["end"].isoformat()}
        )
