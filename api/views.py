"""The versioned read API (`/api/v1/`), health and readiness."""

import datetime as dt
from typing import Any

from django.db import connection
from django.http import Http404, HttpRequest, JsonResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from api import exports, params
from api.renderers import CSV_ROW_CAP, EXPORT_FORMATS, NDJSONRenderer, csv_download, table_download
from api.serializers import (
    BackendDetailSerializer,
    BackendStatsSerializer,
    DailyRowSerializer,
    FailedTestRankSerializer,
    JobSerializer,
    JobVerdictSerializer,
)
from hud import attribution, pages
from hud.core import allowlist, clock
from hud.models import Downstream
from hud.reads import selectors


class ExportableListView(ListAPIView):
    """A paginated JSON list whose `?format=csv` (or `ndjson`) streams every row up to a cap."""

    export_name = "export"

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        """Paginate JSON; stream an export from the database's cursor, never all in memory."""
        export_format = request.accepted_renderer.format
        if export_format not in EXPORT_FORMATS:
            return super().list(request, *args, **kwargs)
        # Built (and the filters checked, a 400 naming the field) before the first byte is sent.
        table = exports.columns(self.get_serializer_class())
        queryset = self.filter_queryset(self.get_queryset())
        rows = exports.rows(queryset, table, CSV_ROW_CAP)
        names = [column.name for column in table]
        return table_download(export_format, names, rows, self.export_name)


JOB_FILTER_PARAMETERS = [
    OpenApiParameter("downstream", str, description="owner/repo of a backend"),
    OpenApiParameter("sha", str, description="upstream head SHA or a prefix of 7+ hex digits"),
    OpenApiParameter("pr", int, description="upstream PR number (0 = not a PR)"),
    OpenApiParameter("job_name", str, description="downstream job name"),
    OpenApiParameter(
        "conclusion",
        str,
        enum=["success", "failure", "cancelled", "timed_out", "skipped", "neutral"],
    ),
    OpenApiParameter("status", str, enum=["in_progress", "completed"]),
    OpenApiParameter("event_type", str, enum=["pull_request", "push", "nightly", "periodic"]),
    OpenApiParameter("since", OpenApiTypes.DATETIME, description="placed at or after"),
    OpenApiParameter("until", OpenApiTypes.DATETIME, description="placed before"),
    OpenApiParameter(
        "format",
        str,
        enum=["json", "csv", "ndjson"],
        description=(
            "json: a page (`page`, `page_size` ≤ 1000). csv or ndjson: every matching row, "
            "newest first, at most 100,000, streamed; ndjson is one JSON object a line with "
            "the fields of a `results` item"
        ),
    ),
]


class JobList(ExportableListView):
    """Job attempts (one row per attempt), newest first, with the filters of the URL table."""

    serializer_class = JobSerializer
    renderer_classes = [*api_settings.DEFAULT_RENDERER_CLASSES, NDJSONRenderer]
    export_name = "jobs"

    def get_queryset(self):
        """Jobs matching the query-string filters."""
        return selectors.jobs(params.job_filters(self.request.query_params))

    @extend_schema(parameters=JOB_FILTER_PARAMETERS)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        """List job attempts."""
        return super().get(request, *args, **kwargs)


DAYS_PARAMETER = OpenApiParameter(
    "days", int, description="window in days, 1 to 90 (default 7), ending now"
)


def _days(request: Request, default: int = pages.DEFAULT_DAYS) -> int:
    """`?days=`: 1 to 90."""
    value = params.parse_int(
        request.query_params, "days", low=1, high=pages.MAX_DAYS, default=default
    )
    return int(value)


def _attach_figures(backends: list[Downstream], days: int) -> list[Downstream]:
    """Give each backend the `/crcr` figures of the window (one frame query for all)."""
    now = clock.now()
    window = pages.Window.ending(now, days)
    for row in pages.summary_rows(backends, window, now):
        row.backend.figures = pages.flat_figures(row, window)
    return backends


class BackendList(ExportableListView):
    """Every allowlisted backend with its level, last result and the `/crcr` window figures."""

    serializer_class = BackendStatsSerializer
    export_name = "backends"

    def get_queryset(self):
        """Backends, highest level first."""
        return selectors.backends()

    @extend_schema(
        parameters=[DAYS_PARAMETER, OpenApiParameter("format", str, enum=["json", "csv"])]
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        """List backends with the figures `/crcr?days=N` shows."""
        return super().get(request, *args, **kwargs)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        """Paginated JSON or a CSV of every backend, each with its window figures."""
        days = _days(request)
        queryset = self.get_queryset()
        if request.accepted_renderer.format == "csv":
            backends = _attach_figures(list(queryset[:CSV_ROW_CAP]), days)
            columns = list(self.get_serializer_class()().fields.keys())
            rows = (BackendStatsSerializer(backend).data for backend in backends)
            return csv_download(rows, columns, self.export_name)
        page = _attach_figures(list(self.paginate_queryset(queryset)), days)
        return self.get_paginated_response(BackendStatsSerializer(page, many=True).data)


class BackendDetail(APIView):
    """One backend, with every figure of its page over a window."""

    @extend_schema(parameters=[DAYS_PARAMETER], responses=BackendDetailSerializer)
    def get(self, request: Request, org: str, repo: str) -> Response:
        """A backend by owner/repo: its list row plus `stats` (hud.stats.backend_summary)."""
        days = _days(request)
        backend = selectors.backend(f"{org}/{repo}")
        if backend is None:
            raise Http404(f"no backend {org}/{repo}")
        (backend,) = _attach_figures([backend], days)
        backend.stats = pages.backend_stats(backend, days, clock.now())
        return Response(BackendDetailSerializer(backend).data)


def _downstream(request: Request, required: bool = False) -> Downstream | None:
    """`?downstream=owner/repo`: a known backend (404 otherwise), or None when absent."""
    name = request.query_params.get("downstream") or None
    if name is None:
        if required:
            raise params.ValidationError({"downstream": ["is required"]})
        return None
    if not allowlist.is_repository_name(name):
        raise params.ValidationError({"downstream": ["must be owner/repo"]})
    backend = selectors.backend(name)
    if backend is None:
        raise Http404(f"no backend {name}")
    return backend


def _event_types(request: Request) -> tuple[str, ...] | None:
    """`?event_type=a,b`: event types from the payload's list, comma-separated."""
    raw = request.query_params.get("event_type") or ""
    if not raw:
        return None
    values = tuple(part.strip() for part in raw.split(",") if part.strip())
    unknown = [value for value in values if value not in params.EVENT_TYPES]
    if unknown:
        raise params.ValidationError(
            {"event_type": ["must be one or more of " + ", ".join(params.EVENT_TYPES)]}
        )
    return values


class DailyMetrics(APIView):
    """`hud.stats.daily_series` per backend and UTC day (the charts of the pages)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("downstream", str, description="owner/repo (default: every L2+)"),
            OpenApiParameter("days", int, description="UTC days ending today, 1 to 90 (30)"),
            OpenApiParameter("event_type", str, description="comma-separated event types"),
            OpenApiParameter("format", str, enum=["json", "csv"]),
        ],
        responses=DailyRowSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        """Daily pass rate with its interval, counts and durations."""
        days = _days(request, pages.METRICS_DEFAULT_DAYS)
        events = _event_types(request)
        backend = _downstream(request)
        backends = [backend] if backend is not None else selectors.on_hud()
        daily = pages.daily_rows(backends, days, clock.now(), events)
        # The records are plain JSON values already; DailyRowSerializer documents them (and
        # tests/api prove the body equal to its output), where running it over 50 backends'
        # 30 days took half the request (~24 ms) to hand back the same values.
        rows = [{**row, "day": row["day"].isoformat()} for row in pages.daily_records(daily)]
        return Response({"count": len(rows), "days": days, "results": rows})


class FailedTestRanking(APIView):
    """A backend's failed tests of a window, most frequent first (the backend page's table)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("downstream", str, description="owner/repo", required=True),
            DAYS_PARAMETER,
            OpenApiParameter("event_type", str, enum=list(params.EVENT_TYPES)),
            OpenApiParameter("job_name", str),
            OpenApiParameter("limit", int, description="rows, 1 to 1000 (50)"),
            OpenApiParameter("format", str, enum=["json", "csv"]),
        ],
        responses=FailedTestRankSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        """Failed tests ranked by occurrences with their most recent message."""
        days = _days(request)
        backend = _downstream(request, required=True)
        query = request.query_params
        limit = params.parse_int(query, "limit", low=1, high=1000, default=50)
        now = clock.now()
        ranked = selectors.failed_tests_ranked(
            backend.id,
            now - dt.timedelta(days=days),
            now,
            event_type=params.parse_choice(query, "event_type", params.EVENT_TYPES),
            job_name=query.get("job_name") or None,
            limit=int(limit),
        )
        rows = FailedTestRankSerializer(ranked, many=True).data
        return Response({"count": len(rows), "days": days, "results": rows})


# The CSV of a PR or commit: one flat row per job, no nested cells.
JOB_CSV_DROPPED = ("failed_tests", "verdict_evidence", "advisory_triage_verdict")


def job_csv_rows(jobs: list[dict[str, Any]], **common: Any) -> list[dict[str, Any]]:
    """Serialized jobs as flat CSV rows: failed tests as `classname::name` joined by `; `."""
    rows = []
    for job in jobs:
        row = {**common, **{k: v for k, v in job.items() if k not in JOB_CSV_DROPPED}}
        tests = job.get("failed_tests") or []
        row["failed_test_count"] = len(tests)
        row["failed_tests"] = "; ".join(f"{t['classname']}::{t['name']}" for t in tests)
        rows.append(row)
    return rows


class PullRequestDetail(APIView):
    """Every backend's jobs for one upstream PR, all head SHAs, newest first."""

    @extend_schema(responses=JobVerdictSerializer(many=True))
    def get(self, request: Request, number: int) -> Response:
        """Jobs of PR `number`; 404 if nothing is known about it."""
        jobs = list(selectors.pr_jobs(number))
        if not jobs:
            raise Http404(f"no results for PR {number}")
        verdicts = attribution.verdicts_for(jobs)
        context = {"verdicts": attribution.index_by_job(verdicts)}
        title = selectors.pr_title(number)
        data = JobVerdictSerializer(jobs, many=True, context=context).data
        if request.accepted_renderer.format == "csv":
            return csv_download(job_csv_rows(data, pr_title=title), None, f"pr-{number}")
        return Response({"pr_number": number, "title": title, "jobs": data, "verdicts": verdicts})


class CommitDetail(APIView):
    """Every backend's jobs for one upstream commit."""

    @extend_schema(responses=JobVerdictSerializer(many=True))
    def get(self, request: Request, sha: str) -> Response:
        """Jobs of commit `sha` (or a unique prefix); 404 if nothing is known about it."""
        jobs = list(selectors.commit_jobs(params.parse_sha(sha)))
        if not jobs:
            raise Http404(f"no results for commit {sha}")
        view = attribution.commit_view(sha) or {"verdicts": [], "backends": []}
        context = {"verdicts": attribution.index_by_job(view["verdicts"])}
        data = JobVerdictSerializer(jobs, many=True, context=context).data
        if request.accepted_renderer.format == "csv":
            return csv_download(job_csv_rows(data), None, f"commit-{sha.lower()[:12]}")
        return Response(
            {
                "sha": sha.lower(),
                "jobs": data,
                "verdicts": view["verdicts"],
                "cross_backend": view["backends"],
            }
        )


def healthz(request: HttpRequest) -> JsonResponse:
    """The process is up (no dependency checked)."""
    return JsonResponse({"ok": True})


def readyz(request: HttpRequest) -> JsonResponse:
    """The database answers; 503 otherwise, so a load balancer stops sending traffic."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:
        return JsonResponse({"ok": False, "database": "unavailable"}, status=503)
    return JsonResponse({"ok": True, "database": "ok"})
