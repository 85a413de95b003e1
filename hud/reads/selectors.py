"""The reads the pages and the API need, in one place so both show the same rows."""

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

import pandas as pd
from django.conf import settings
from django.db import connection
from django.db.models import Count, Exists, Max, OuterRef, Prefetch, Q, QuerySet, Subquery

from hud import stats
from hud.levels import active_overrides  # noqa: F401  (one copy, in hud.levels)
from hud.models import (
    Delivery,
    DemotionWarning,
    Dispatch,
    Downstream,
    FailedTest,
    GateEvaluation,
    Job,
    Level,
    LogicalJob,
    PromotionRequest,
    sql,
)
from hud.models.sql import any_sql
from hud.reads.rows import driver_rows


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


def on_shas(keys: Iterable[tuple[int, str, str]]) -> Q:
    """Rows (jobs or logical jobs) of each (backend id, event type, head SHA) of `keys`: per
    event type and set of SHAs, the backends that ran exactly those (ranges of the
    (downstream_id, event_type, head_sha, ...) index); none for no keys.

    Backends that ran the same SHAs share one term: on a PR's or a commit's page every backend
    usually did, and fifty terms of one backend each cost more to compile than to answer."""
    shas_of: dict[tuple[int, str], set[str]] = defaultdict(set)
    for backend, event_type, sha in keys:
        shas_of[(backend, event_type)].add(sha)
    backends_of: dict[tuple[str, frozenset[str]], list[int]] = defaultdict(list)
    for (backend, event_type), shas in sorted(shas_of.items()):
        backends_of[(event_type, frozenset(shas))].append(backend)
    rows = Q(pk__in=[])
    for (event_type, shas), backends in backends_of.items():
        rows |= Q(downstream_id__any=backends, event_type=event_type, head_sha__any=sorted(shas))
    return rows


def pr_jobs(number: int) -> QuerySet[Job]:
    """Every job reported for an upstream PR, all head SHAs, newest first."""
    return jobs_with_failed_tests(jobs(JobFilters(pr=number)))


def commit_jobs(sha: str) -> QuerySet[Job]:
    """Every job reported for an upstream commit (full SHA or a prefix of 7+)."""
    return jobs_with_failed_tests(jobs(JobFilters(sha=sha)))


# A logical job's key on its derived row (hud.models.LogicalJob), backend by id.
LOGICAL_KEY_FIELDS = ("downstream_id", "event_type", "head_sha", "workflow_name", "job_name")


def logical_jobs_of(attempts: list[Job]) -> list[dict]:
    """The derived rows of the logical jobs these attempts belong to (their key, latest attempt
    id, its status and conclusion, attempt count), read by the attempts' head SHAs."""
    keys = {tuple(getattr(job, name) for name in LOGICAL_KEY_FIELDS) for job in attempts}
    rows = LogicalJob.objects.filter(head_sha__in={key[2] for key in keys}).values(
        *LOGICAL_KEY_FIELDS, "latest_job_id", "latest_status", "latest_conclusion", "attempts"
    )
    return [row for row in rows if tuple(row[name] for name in LOGICAL_KEY_FIELDS) in keys]


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


class HudBackend(NamedTuple):
    """A backend as the metrics page and its export list them."""

    id: int
    full_name: str
    level: int


# The backends the HUD shows (L2 and up, listed), written out: the metrics page and its export
# need their names, not the last result that `backends()` probes 50 indexes for, nor a model
# instance of each row.
_ON_HUD = (
    f"SELECT id, full_name, level FROM {Downstream._meta.db_table}"
    " WHERE level >= %s AND NOT delisted ORDER BY level DESC, full_name"
)


def on_hud() -> list[HudBackend]:
    """The listed backends at L2 and up, highest level first (`backends()`' order)."""
    with connection.cursor() as cursor:
        cursor.execute(_ON_HUD, [Level.L2])
        return [HudBackend(*row) for row in cursor.fetchall()]


# `backends()`'s row for one name, written out: every page and API read of a backend starts
# here, and building the queryset cost three times its SQL (~0.7 ms of 1 ms).
_BACKEND = (
    f"SELECT {', '.join(sql.DOWNSTREAM_COLUMNS)}, (SELECT placed_at FROM {Job._meta.db_table}"
    " WHERE downstream_id = d.id ORDER BY placed_at DESC LIMIT 1)"
    f" FROM {Downstream._meta.db_table} d WHERE LOWER(full_name) = %s"
)


def backend(full_name: str) -> Downstream | None:
    """One backend by owner/repo (any case), delisted or not, with its `last_result_at`."""
    with connection.cursor() as cursor:
        cursor.execute(_BACKEND, [full_name.lower()])
        row = cursor.fetchone()
    if row is None:
        return None
    found = sql.instance(Downstream, sql.DOWNSTREAM_COLUMNS, row[:-1])
    # The subquery's column keeps placed_at's declared type: SQLite's driver gives it naive.
    found.last_result_at = sql.aware(row[-1])
    return found


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
# Their names in a jobs frame (hud.stats).
FRAME_NAMES = ["id", "downstream", *FRAME_COLUMNS[2:]]


def jobs_frame(
    start: dt.datetime, end: dt.datetime, downstream_ids: list[int] | None = None
) -> pd.DataFrame:
    """The stats jobs frame (hud.stats contract) of attempts placed in [start − margin, end)."""
    queryset = Job.objects.filter(placed_at__gte=start - FRAME_MARGIN, placed_at__lt=end)
    if downstream_ids is not None:
        queryset = queryset.filter(downstream_id__in=downstream_ids)
    return stats.rows_frame(driver_rows(queryset.values_list(*FRAME_COLUMNS)), FRAME_NAMES)


# --------------------------------------------------------------------------- page reads


def gate_evaluations(downstream_id: int, since: dt.date) -> list[tuple[dt.date, dict]]:
    """A backend's stored daily gate evaluations from `since`, oldest first: (day, detail)."""
    rows = GateEvaluation.objects.filter(downstream_id=downstream_id, day__gte=since)
    return list(rows.order_by("day").values_list("day", "detail"))


def open_warnings(downstream_ids: list[int]) -> dict[int, DemotionWarning]:
    """The open demotion warning of each backend that has one (at most one each, one query)."""
    rows = DemotionWarning.objects.filter(
        downstream_id__in=downstream_ids, status=DemotionWarning.Status.OPEN
    )
    return {warning.downstream_id: warning for warning in rows}


def pending_requests(downstream_ids: list[int]) -> dict[int, PromotionRequest]:
    """The pending level-change request of each backend that has one (one query)."""
    rows = PromotionRequest.objects.filter(
        downstream_id__in=downstream_ids, status=PromotionRequest.Status.PENDING
    ).order_by("downstream_id", "-requested_at")
    pending: dict[int, PromotionRequest] = {}
    for item in rows:
        pending.setdefault(item.downstream_id, item)
    return pending


def latest_evaluations(downstream_ids: list[int], since: dt.date) -> dict[int, GateEvaluation]:
    """Each backend's newest daily gate evaluation on or after `since` (one query)."""
    rows = GateEvaluation.objects.filter(downstream_id__in=downstream_ids, day__gte=since).order_by(
        "downstream_id", "-day"
    )
    latest: dict[int, GateEvaluation] = {}
    for evaluation in rows.only("downstream_id", "day", "retention", "stable_retention"):
        latest.setdefault(evaluation.downstream_id, evaluation)
    return latest


def latest_attempt_rows(ids: list[int]) -> dict[int, Job]:
    """Job rows by id (a results page's latest attempts), with their backend, in one query."""
    if not ids:
        return {}
    return {job.id: job for job in Job.objects.select_related("downstream").filter(id__in=ids)}


@dataclass(frozen=True)
class FailedTestRank:
    """One failed test of a window: how often it failed and its most recent message."""

    classname: str
    name: str
    occurrences: int
    jobs: int
    last_seen: dt.datetime
    last_message: str
    last_job_id: int
    last_workflow_url: str


def failed_tests_ranked(
    downstream_id: int,
    start: dt.datetime,
    end: dt.datetime,
    *,
    event_type: str | None = None,
    job_name: str | None = None,
    limit: int = 50,
) -> list[FailedTestRank]:
    """Failed tests of a backend's attempts placed in [start, end), most frequent first.

    The tests are those of the window's attempts (`__any` of their ids): a join on the
    attempts' filter let PostgreSQL hash every failed test stored."""
    jobs = Job.objects.filter(downstream_id=downstream_id, placed_at__gte=start, placed_at__lt=end)
    if event_type:
        jobs = jobs.filter(event_type=event_type)
    if job_name:
        jobs = jobs.filter(job_name=job_name)
    queryset = FailedTest.objects.filter(job_id__any=jobs.values("id"))
    ranked = list(
        queryset.values("classname", "name")
        .annotate(
            occurrences=Count("id"),
            jobs=Count("job_id", distinct=True),
            last_id=Max("id"),
            last_seen=Max("job__placed_at"),
        )
        .order_by("-occurrences", "-last_seen", "classname", "name")[:limit]
    )
    latest = {
        row["id"]: row
        for row in FailedTest.objects.filter(id__in=[r["last_id"] for r in ranked]).values(
            "id", "message", "job_id", "job__workflow_url"
        )
    }
    return [
        FailedTestRank(
            classname=row["classname"],
            name=row["name"],
            occurrences=row["occurrences"],
            jobs=row["jobs"],
            last_seen=row["last_seen"],
            last_message=latest[row["last_id"]]["message"],
            last_job_id=latest[row["last_id"]]["job_id"],
            last_workflow_url=latest[row["last_id"]]["job__workflow_url"],
        )
        for row in ranked
    ]


class ShownTest(NamedTuple):
    """A failed test as a results page lists it."""

    classname: str
    name: str
    message: str


def failed_tests_for(jobs_ids: list[int]) -> dict[int, list[ShownTest]]:
    """Failed tests of the given attempts, by job id, in one query: what a results page lists
    of each (not its stack trace, up to 4 kB each, nor a model instance per test)."""
    grouped: dict[int, list[ShownTest]] = {job_id: [] for job_id in jobs_ids}
    rows = FailedTest.objects.filter(job_id__any=jobs_ids).order_by("job_id", "id")
    for job_id, *shown in rows.values_list("job_id", "classname", "name", "message"):
        grouped[job_id].append(ShownTest(*shown))
    return grouped


def dispatches_for(*, pr: int | None = None, sha: str | None = None) -> list[Dispatch]:
    """Dispatches of the deliveries of a PR or a commit (full SHA or prefix), oldest first."""
    queryset = Dispatch.objects.select_related("delivery", "downstream")
    if pr is not None:
        queryset = queryset.filter(delivery__pr_number=pr, delivery__event_type="pull_request")
    if sha is not None:
        sha = sha.lower()
        queryset = (
            queryset.filter(delivery__head_sha=sha)
            if len(sha) >= 40
            else queryset.filter(delivery__head_sha__startswith=sha)
        )
    return list(queryset.order_by("created_at", "id"))


def delivery_for_sha(sha: str) -> Delivery | None:
    """The newest delivery of a commit (full SHA or prefix), to name its PR or ref."""
    sha = sha.lower()
    queryset = (
        Delivery.objects.filter(head_sha=sha)
        if len(sha) >= 40
        else Delivery.objects.filter(head_sha__startswith=sha)
    )
    return queryset.order_by("-received_at").first()


def pr_titles(numbers: list[int]) -> dict[int, str]:
    """Titles of many PRs from their deliveries, in one query."""
    return {number: info["title"] for number, info in pr_details(numbers).items()}


def pr_author(number: int) -> str:
    """The PR's author (pull_request.user.login) from its latest delivery that named one."""
    return pr_details([number]).get(number, {}).get("author", "")


def pr_details(numbers: list[int]) -> dict[int, dict[str, str]]:
    """Title and author of many PRs from their newest deliveries that name them, in one query."""
    details: dict[int, dict[str, str]] = {}
    rows = (
        Delivery.objects.filter(pr_number__in=[n for n in numbers if n])
        .exclude(pr_title="", pr_author="")
        .order_by("pr_number", "-received_at")
        .values_list("pr_number", "pr_title", "pr_author")
    )
    for number, title, author in rows:
        entry = details.setdefault(number, {"title": "", "author": ""})
        # The newest delivery wins per field (a title can change; an old one may lack a login).
        entry["title"] = entry["title"] or title
        entry["author"] = entry["author"] or author
    return details


def no_response_after() -> dt.timedelta:
    """How long an L2+ backend has to send a first callback (CRCR_NO_RESPONSE_AFTER)."""
    return dt.timedelta(seconds=settings.CRCR_NO_RESPONSE_AFTER_SECONDS)


def sent_to_l2_plus(start: dt.datetime, end: dt.datetime) -> QuerySet[Dispatch]:
    """Dispatches sent to L2+ backends between `start` and `end`, each marked `answered`."""
    answered = Job.objects.filter(
        downstream_id=OuterRef("downstream_id"), delivery_id=OuterRef("delivery__delivery_id")
    )
    return Dispatch.objects.filter(
        outcome=Dispatch.Outcome.SENT,
        level_at_dispatch__gte=Level.L2,
        dispatched_at__gte=start,
        dispatched_at__lte=end,
    ).annotate(answered=Exists(answered))


# The answered deliveries of one backend `recent_job_names` reads: among its latest attempts
# (at most `_RECENT_ATTEMPTS`), the first attempt of each delivery, newest first.
_RECENT_ATTEMPTS = 2000
_RECENT_DELIVERIES = (
    "SELECT downstream_id, delivery_id FROM ("
    " SELECT downstream_id, delivery_id, placed_at, id FROM ("
    "  SELECT downstream_id, delivery_id, placed_at, id, ROW_NUMBER() OVER"
    "   (PARTITION BY delivery_id ORDER BY placed_at DESC, id DESC) AS nth FROM ("
    f"   SELECT downstream_id, delivery_id, placed_at, id FROM {Job._meta.db_table}"
    "   WHERE downstream_id = %s AND {events} AND verified = %s"
    "   AND placed_at >= %s AND placed_at <= %s AND NOT head_sha = %s"
    f"   ORDER BY placed_at DESC, id DESC LIMIT {_RECENT_ATTEMPTS}) AS recent) AS numbered"
    " WHERE nth = 1 ORDER BY placed_at DESC, id DESC LIMIT %s) AS latest"
)


def recent_job_names(
    event_types_of: dict[int, Iterable[str]],
    head_sha: str,
    since: dt.datetime,
    until: dt.datetime,
    runs: int,
) -> dict[int, set[tuple[str, str]]]:
    """Per backend id (`event_types_of`: backend id → event types), the (workflow, job) names
    it ran for its last `runs` answered deliveries of those event types placed in
    [since, until], other than `head_sha`'s (verified attempts only): what the L4 gate
    expects of it. One written-out statement for every backend: through the ORM, two
    statements a backend cost more to compile than to answer (the PR page's gate of five L4
    backends: 6.6 ms of Python around 6.4 ms of SQL)."""
    names: dict[int, set[tuple[str, str]]] = {backend: set() for backend in event_types_of}
    if not names:
        return names
    adapt = connection.ops.adapt_datetimefield_value
    parts, params = [], []
    for backend, event_types in sorted(event_types_of.items()):
        events, more = any_sql("event_type", sorted(set(event_types)))
        parts.append(_RECENT_DELIVERIES.format(events=events))
        params += [backend, *more, True, adapt(since), adapt(until), head_sha, runs]
    statement = (
        "SELECT DISTINCT job.downstream_id, job.workflow_name, job.job_name"
        f" FROM {Job._meta.db_table} AS job JOIN ({' UNION ALL '.join(parts)}) AS chosen"
        " ON job.downstream_id = chosen.downstream_id"
        " AND job.delivery_id = chosen.delivery_id"
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        for backend, workflow, job in cursor.fetchall():
            names[backend].add((workflow, job))
    return names
