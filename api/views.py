"""The versioned read API (`/api/v1/`), health and readiness."""

from typing import Any

from django.db import connection
from django.http import Http404, HttpRequest, JsonResponse, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import params
from api.renderers import CSV_ROW_CAP, csv_lines
from api.serializers import BackendSerializer, JobDetailSerializer, JobSerializer
from hud import selectors


class ExportableListView(ListAPIView):
    """A paginated JSON list whose `?format=csv` streams every row (up to a cap) instead."""

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        """Paginate JSON; stream CSV row by row so a large export never sits in memory."""
        if request.accepted_renderer.format != "csv":
            return super().list(request, *args, **kwargs)
        queryset = self.filter_queryset(self.get_queryset())[:CSV_ROW_CAP]
        serializer_class = self.get_serializer_class()
        columns = list(serializer_class().fields.keys())
        rows = (serializer_class(row).data for row in queryset.iterator(chunk_size=2000))
        response = StreamingHttpResponse(csv_lines(rows, columns), content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="{self.export_name}.csv"'
        return response

    export_name = "export"


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
    OpenApiParameter("format", str, enum=["json", "csv"]),
]


class JobList(ExportableListView):
    """Job attempts (one row per attempt), newest first, with the filters of the URL table."""

    serializer_class = JobSerializer
    export_name = "jobs"

    def get_queryset(self):
        """Jobs matching the query-string filters."""
        return selectors.jobs(params.job_filters(self.request.query_params))

    @extend_schema(parameters=JOB_FILTER_PARAMETERS)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        """List job attempts."""
        return super().get(request, *args, **kwargs)


class BackendList(ExportableListView):
    """Every allowlisted backend with its level and last result."""

    serializer_class = BackendSerializer
    export_name = "backends"

    def get_queryset(self):
        """Backends, highest level first."""
        return selectors.backends()


class BackendDetail(APIView):
    """One backend."""

    @extend_schema(responses=BackendSerializer)
    def get(self, request: Request, org: str, repo: str) -> Response:
        """A backend by owner/repo; 404 if unknown."""
        backend = selectors.backend(f"{org}/{repo}")
        if backend is None:
            raise Http404(f"no backend {org}/{repo}")
        return Response(BackendSerializer(backend).data)


class PullRequestDetail(APIView):
    """Every backend's jobs for one upstream PR, all head SHAs, newest first."""

    @extend_schema(responses=JobDetailSerializer(many=True))
    def get(self, request: Request, number: int) -> Response:
        """Jobs of PR `number`; 404 if nothing is known about it."""
        jobs = list(selectors.pr_jobs(number))
        if not jobs:
            raise Http404(f"no results for PR {number}")
        return Response(
            {
                "pr_number": number,
                "title": selectors.pr_title(number),
                "jobs": JobDetailSerializer(jobs, many=True).data,
            }
        )


class CommitDetail(APIView):
    """Every backend's jobs for one upstream commit."""

    @extend_schema(responses=JobDetailSerializer(many=True))
    def get(self, request: Request, sha: str) -> Response:
        """Jobs of commit `sha` (or a unique prefix); 404 if nothing is known about it."""
        jobs = list(selectors.commit_jobs(params.parse_sha(sha)))
        if not jobs:
            raise Http404(f"no results for commit {sha}")
        return Response({"sha": sha.lower(), "jobs": JobDetailSerializer(jobs, many=True).data})


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
