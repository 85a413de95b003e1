"""The reads the pages and the API need, in one place so both show the same rows."""

import datetime as dt
from dataclasses import dataclass

import pandas as pd
from django.db.models import OuterRef, Prefetch, QuerySet, Subquery

from hud import stats
from hud.models import Delivery, Downstream, FailedTest, Job


@dataclass(frozen=True)
class JobFilters:
    """Filters of `/api/v1/jobs` (and of the pages that link to it)."""

    downstream: str | None = None
    sha: str | None = None
    pr: int | None = None
    job_name: str | None = None
    conclusion: str | None = None
    status: str | None = None
    event_type: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None


def jobs(filters: JobFilters) -> QuerySet[Job]:
    """Job attempts matching the filters, newest first."""
    queryset = Job.objects.select_related("downstream")
    if filters.downstream:
        queryset = queryset.filter(downstream__full_name__iexact=filters.downstream)
    if filters.sha:
        sha = filters.sha.lower()
        queryset = (
            queryset.filter(head_sha=sha)
            if len(sha) >= 40
            else queryset.filter(head_sha__startswith=sha)
        )
    if filters.pr is not None:
        queryset = queryset.filter(pr_number=filters.pr)
    if filters.job_name:
        queryset = queryset.filter(job_name=filters.job_name)
    if filters.conclusion:
        queryset = queryset.filter(conclusion=filters.conclusion)
    if filters.status:
        queryset = queryset.filter(status=filters.status)
    if filters.event_type:
        queryset = queryset.filter(event_type=filters.event_type)
    if filters.since:
        queryset = queryset.filter(placed_at__gte=filters.since)
    if filters.until:
        queryset = queryset.filter(placed_at__lt=filters.until)
    return queryset.order_by("-placed_at", "-id")


def jobs_with_failed_tests(queryset: QuerySet[Job]) -> QuerySet[Job]:
    """The same jobs with their failed tests fetched in one extra query."""
    return queryset.prefetch_related(
        Prefetch("failed_tests", queryset=FailedTest.objects.order_by("id"))
    )


def pr_jobs(number: int) -> QuerySet[Job]:
    """Every job reported for an upstream PR, all head SHAs, newest first."""
    return jobs_with_failed_tests(jobs(JobFilters(pr=number)))


def commit_jobs(sha: str) -> QuerySet[Job]:
    """Every job reported for an upstream commit (full SHA or a prefix of 7+)."""
    return jobs_with_failed_tests(jobs(JobFilters(sha=sha)))


def pr_title(number: int) -> str:
    """The PR's title from its latest delivery, if any delivery told us."""
    delivery = (
        Delivery.objects.filter(pr_number=number)
        .exclude(pr_title="")
        .order_by("-received_at")
        .first()
    )
    return delivery.pr_title if delivery else ""


def backends(include_delisted: bool = False) -> QuerySet[Downstream]:
    """Downstream backends with the time of their last result, highest level first."""
    # A correlated subquery walks the (downstream, placed_at) index backwards: one row read
    # per backend, however long the history.
    latest = (
        Job.objects.filter(downstream=OuterRef("pk")).order_by("-placed_at").values("placed_at")[:1]
    )
    queryset = Downstream.objects.annotate(last_result_at=Subquery(latest))
    if not include_delisted:
        queryset = queryset.filter(delisted=False)
    return queryset.order_by("-level", "full_name")


def backend(full_name: str) -> Downstream | None:
    """One backend by owner/repo (any case)."""
    return backends(include_delisted=True).filter(full_name__iexact=full_name).first()


# Attempts of a logical job can straddle a window's start; loading a margin before it lets
# first-attempt and re-run figures see them.
FRAME_MARGIN = dt.timedelta(days=2)
FRAME_COLUMNS = [
    "id",
    "downstream__full_name",
    "event_type",
    "pr_number",
    "head_sha",
    "workflow_name",
    "job_name",
    "run_id",
    "run_attempt",
    "status",
    "conclusion",
    "placed_at",
    "in_progress_received_at",
    "queue_seconds",
    "execution_seconds",
    "closed_by_sweeper",
    "ref",
]


def jobs_frame(
    start: dt.datetime, end: dt.datetime, downstream_ids: list[int] | None = None
) -> pd.DataFrame:
    """The stats jobs frame (hud.stats contract) of attempts placed in [start − margin, end)."""
    queryset = Job.objects.filter(placed_at__gte=start - FRAME_MARGIN, placed_at__lt=end)
    if downstream_ids is not None:
        queryset = queryset.filter(downstream_id__in=downstream_ids)
    rows = list(queryset.values_list(*FRAME_COLUMNS))
    if not rows:
        return stats.empty_jobs_frame()
    frame = pd.DataFrame.from_records(rows, columns=FRAME_COLUMNS).rename(
        columns={"downstream__full_name": "downstream"}
    )
    return stats.coerce_jobs_frame(frame)
