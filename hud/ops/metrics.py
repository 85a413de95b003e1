"""Prometheus metrics: event counters kept by the web processes, gauges read at scrape time.

Two kinds, chosen by where the truth lives:

* Answers (HTTP codes, ingestion outcomes) happen in the web processes and are not stored
  anywhere else, so they are prometheus-client counters. Under gunicorn several processes
  answer; with `PROMETHEUS_MULTIPROC_DIR` set, prometheus-client writes each process's counters
  to files there and a scrape adds them up (gunicorn.conf.py empties the folder at start and
  marks dead workers). Without it (runserver, tests) they live in memory.
* State (jobs in progress, pending dispatches and their age, sweeper closes, queue depth,
  reconciler lag and failing mirror rows) is read from PostgreSQL and the broker when scraped,
  so every web process and every host reports the same numbers no matter which process did the
  work (the sweeper, the senders and the reconcilers run in Celery workers).

`MIRROR_ERRORS` is the one counter bumped outside a web process (hud.checks.mirror, where a GitHub
call fails): it is exported only by processes that share the scrape's counters (the embedded
in-process pool, or a worker given the same `PROMETHEUS_MULTIPROC_DIR`); the
`crcr_mirror_failing` gauge is the same signal read from the database, valid on every set-up.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Case, Count, Exists, F, Min, OuterRef, Q, QuerySet, When
from django.db.models.functions import Coalesce
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import REGISTRY, Collector

from hud import github
from hud.checks import mirror
from hud.core import clock, taskqueue
from hud.models import (
    CheckRunMirror,
    Dispatch,
    GateCheck,
    Job,
    Level,
    Notification,
    OncallComment,
    RerunRequest,
)

logger = logging.getLogger(__name__)

HTTP_RESPONSES = Counter(
    "crcr_http_responses",
    "HTTP answers by route pattern, method and status code.",
    ["route", "method", "code"],
)
INGEST_OUTCOMES = Counter(
    "crcr_ingest",
    "Ingestion answers by endpoint (callback, forward, webhook) and outcome: the status of an "
    "accepted body (created, updated, duplicate, …) or the error code of a refused one.",
    ["endpoint", "outcome"],
)
MIRROR_ERRORS = mirror.MIRROR_ERRORS  # defined where it is counted; exported here

SWEEPER_WINDOW = dt.timedelta(hours=24)
SWEEPER_OUTAGE_MARGIN = dt.timedelta(days=7)
CELERY_DEFAULT_QUEUE = "celery"


@dataclass(frozen=True)
class QueueDepth:
    """Tasks waiting: on the broker's queue, or in this process's in-process pool."""

    backend: str
    pending: int | None


def queue_depth() -> QueueDepth:
    """Length of the Celery queue on Redis, or the in-process pool's backlog without a broker."""
    broker = settings.CELERY_BROKER_URL
    if broker:
        if not broker.startswith(("redis://", "rediss://", "unix://")):
            return QueueDepth("broker", None)
        import redis

        try:
            client = redis.Redis.from_url(broker, socket_timeout=1, socket_connect_timeout=1)
            return QueueDepth("redis", int(client.llen(CELERY_DEFAULT_QUEUE)))
        except redis.RedisError as error:
            logger.warning("broker queue length unavailable", extra={"error": type(error).__name__})
            return QueueDepth("redis", None)
    return QueueDepth("inprocess", taskqueue.in_process_queue_depth())


def _mirror_window(now: dt.datetime) -> tuple[dt.datetime, int]:
    """The reconciler's window (older rows are never retried) and its attempt limit."""
    seconds = int(getattr(settings, "CRCR_MIRROR_WINDOW_SECONDS", 3 * 86400))
    return now - dt.timedelta(seconds=seconds), int(
        getattr(settings, "CRCR_MIRROR_MAX_ATTEMPTS", 10)
    )


def _backlog(rows: QuerySet, since: Any) -> tuple[int, dt.datetime | None]:
    """How many rows wait to be sent and since when the oldest waits."""
    found = rows.aggregate(count=Count("id"), oldest=Min(since))
    return int(found["count"]), found["oldest"]


def reconciler_backlogs(now: dt.datetime) -> dict[str, tuple[int, dt.datetime | None]]:
    """Per queue: rows not yet on GitHub (or not yet sent) and the oldest one's start.

    Mirror rows count while the reconciler would still retry them (inside its window, attempts
    left); a check run from when the job state it shows was recorded. Per-job check runs are
    bounded by the job's placed_at (indexed), the small per-SHA and per-PR tables by created_at.
    """
    window, max_attempts = _mirror_window(now)
    unsent = Q(resync=True) | Q(check_run_id__isnull=True) | ~Q(sent_hash=F("desired_hash"))
    check_runs = CheckRunMirror.objects.filter(
        job__placed_at__gte=window, wanted=True, attempts__lt=max_attempts
    ).filter(unsent)
    gates = (
        GateCheck.objects.filter(created_at__gte=window, attempts__lt=max_attempts)
        .exclude(desired_hash="")
        .filter(unsent)
    )
    comments = (
        OncallComment.objects.filter(created_at__gte=window, attempts__lt=max_attempts)
        .exclude(desired_hash="")
        .filter(Q(resync=True) | ~Q(last_body_hash=F("desired_hash")))
    )
    reruns = RerunRequest.objects.filter(
        outcome=RerunRequest.Outcome.PENDING, created_at__gte=window, attempts__lt=max_attempts
    )
    return {
        "dispatch": _backlog(
            Dispatch.objects.filter(outcome=Dispatch.Outcome.PENDING), "created_at"
        ),
        "check_run": _backlog(check_runs, Coalesce("source_updated_at", "created_at")),
        "gate": _backlog(gates, Coalesce("evaluated_at", "created_at")),
        "oncall_comment": _backlog(comments, "created_at"),
        "rerun": _backlog(reruns, "created_at"),
        "notification": _backlog(
            Notification.objects.filter(status=Notification.Status.PENDING), "created_at"
        ),
    }


def github_unsynced_since(
    now: dt.datetime, backlogs: dict[str, tuple[int, dt.datetime | None]]
) -> dt.datetime | None:
    """When the oldest job change GitHub has not acknowledged (check run or gate) happened.

    Unlike the reconciler backlog this also sees changes no worker has looked at yet (workers
    down, a lost enqueue): a check run computed from an older job state, a gate not evaluated
    since its job changed, a job with no mirror row at all. `backlogs`: reconciler_backlogs'.
    """
    if not github.mirror_enabled():
        return None
    window, _ = _mirror_window(now)
    gate_evaluated = Exists(
        GateCheck.objects.filter(
            head_sha=OuterRef("head_sha"), evaluated_at__gte=OuterRef("updated_at")
        )
    )
    behind = (
        Job.objects.filter(
            verified=True,
            event_type="pull_request",
            pr_number__gt=0,
            downstream__level__gte=Level.L3,
            updated_at__gte=window,
        )
        .exclude(source=Job.Source.IMPORT)
        .filter(
            Q(mirror__isnull=True)
            | Q(mirror__source_updated_at__isnull=True)
            | Q(mirror__source_updated_at__lt=F("updated_at"))
            | (Q(downstream__level__gte=Level.L4) & ~gate_evaluated)
        )
    )
    # Never sent: the job's first report is the oldest change; else its latest one.
    first_change = Case(
        When(mirror__sent_at__isnull=True, then=Coalesce("in_progress_received_at", "updated_at")),
        default=F("updated_at"),
    )
    oldest = [behind.aggregate(oldest=Min(first_change))["oldest"]]
    oldest += [backlogs["check_run"][1], backlogs["gate"][1]]
    return min((moment for moment in oldest if moment is not None), default=None)


def mirror_failing(now: dt.datetime) -> dict[tuple[str, str], int]:
    """Mirror rows inside the reconciler's window whose last GitHub call failed.

    `retrying`: the last attempt failed and attempts remain; `given_up`: attempts exhausted or
    refused outright (left alone until the state to show changes).
    """
    window, max_attempts = _mirror_window(now)
    failing: dict[tuple[str, str], int] = {}
    for kind, rows in (
        ("check_run", CheckRunMirror.objects.filter(job__placed_at__gte=window)),
        ("gate", GateCheck.objects.filter(created_at__gte=window)),
        ("oncall_comment", OncallComment.objects.filter(created_at__gte=window)),
    ):
        found = rows.exclude(last_error="").aggregate(
            retrying=Count("id", filter=Q(attempts__lt=max_attempts)),
            given_up=Count("id", filter=Q(attempts__gte=max_attempts)),
        )
        failing[(kind, "retrying")] = int(found["retrying"])
        failing[(kind, "given_up")] = int(found["given_up"])
    reruns = RerunRequest.objects.filter(created_at__gte=window).aggregate(
        retrying=Count("id", filter=Q(outcome=RerunRequest.Outcome.PENDING) & ~Q(reason="")),
        given_up=Count("id", filter=Q(outcome=RerunRequest.Outcome.FAILED)),
    )
    failing[("rerun", "retrying")] = int(reruns["retrying"])
    failing[("rerun", "given_up")] = int(reruns["given_up"])
    return failing


def _gauge(name: str, documentation: str, value: float, **labels: str) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


@dataclass(frozen=True)
class ScrapeState:
    """What one scrape reads from the database (the gauges' values, before they are shaped)."""

    in_progress: int
    pending: int
    oldest_pending: dt.datetime | None
    swept: int
    backlogs: dict[str, tuple[int, dt.datetime | None]]
    failing: dict[tuple[str, str], int]
    unsynced: dt.datetime | None


def read_state(now: dt.datetime) -> ScrapeState:
    """Read every database gauge at `now`; a DatabaseError propagates (the database is down)."""
    in_progress = Job.objects.filter(status=Job.Status.IN_PROGRESS).count()
    pending = Dispatch.objects.filter(outcome=Dispatch.Outcome.PENDING)
    pending_count = pending.count()
    oldest = pending.aggregate(oldest=Min("created_at"))["oldest"]
    swept = _swept_recently(now)
    backlogs = reconciler_backlogs(now)
    failing = mirror_failing(now)
    unsynced = github_unsynced_since(now, backlogs)
    return ScrapeState(in_progress, pending_count, oldest, swept, backlogs, failing, unsynced)


def _swept_recently(now: dt.datetime) -> int:
    """Jobs the sweeper closed as timed_out in the last SWEEPER_WINDOW (and still closed so)."""
    # Bounded by placed_at (indexed) so a scrape never scans all jobs: the sweeper closes
    # a job zombie-timeout after it began, give or take a sweeper outage of a week.
    timeout = dt.timedelta(seconds=settings.CRCR_ZOMBIE_TIMEOUT_SECONDS)
    horizon = now - SWEEPER_WINDOW - timeout - SWEEPER_OUTAGE_MARGIN
    return Job.objects.filter(
        placed_at__gte=horizon,
        closed_by_sweeper=True,
        completed_received_at__gte=now - SWEEPER_WINDOW,
    ).count()


def _age(now: dt.datetime, since: dt.datetime | None) -> float:
    """Seconds from `since` to `now` (0 when nothing waits)."""
    return max((now - since).total_seconds(), 0.0) if since else 0.0


def _job_gauges(state: ScrapeState, now: dt.datetime) -> Iterator[Metric]:
    """Jobs in progress, pending dispatches and their lag, the sweeper's closes."""
    yield _gauge(
        "crcr_jobs_in_progress", "Jobs whose latest state is in_progress.", state.in_progress
    )
    yield _gauge(
        "crcr_dispatches_pending", "Dispatches not yet sent (or being retried).", state.pending
    )
    yield _gauge(
        "crcr_dispatch_oldest_pending_age_seconds",
        "Age of the oldest pending dispatch: how far the sender and reconciler lag.",
        _age(now, state.oldest_pending),
    )
    yield _gauge(
        "crcr_sweeper_closed_jobs_24h",
        "Jobs the sweeper closed as timed_out in the last 24 hours (and still closed so).",
        state.swept,
    )


def _reconciler_gauges(state: ScrapeState, now: dt.datetime) -> Iterator[Metric]:
    """Per-queue backlog and lag, how far GitHub is behind, and failing mirror rows."""
    backlog = GaugeMetricFamily(
        "crcr_reconciler_backlog",
        "Rows waiting to reach GitHub or a notification target, by queue (dispatch, "
        "check_run, gate, oncall_comment, rerun, notification).",
        labels=["queue"],
    )
    age = GaugeMetricFamily(
        "crcr_reconciler_lag_seconds",
        "Age of the oldest row still waiting, by queue: how far senders and reconcilers lag.",
        labels=["queue"],
    )
    for queue, (count, since) in state.backlogs.items():
        backlog.add_metric([queue], count)
        age.add_metric([queue], _age(now, since))
    yield backlog
    yield age
    yield _gauge(
        "crcr_github_unsynced_age_seconds",
        "Age of the oldest job change GitHub does not show yet on its check run or gate "
        "(0 when in sync), including changes no worker has picked up.",
        _age(now, state.unsynced),
    )
    failures = GaugeMetricFamily(
        "crcr_mirror_failing",
        "Mirror rows (inside the reconciler window) whose last GitHub call failed, by kind "
        "and state (retrying, given_up).",
        labels=["kind", "state"],
    )
    for (kind, state_name), count in state.failing.items():
        failures.add_metric([kind, state_name], count)
    yield failures


class StateCollector(Collector):
    """Gauges read from the database and the broker each time Prometheus scrapes."""

    def collect(self) -> Iterator[Metric]:
        """Yield the current gauges; a database outage shows as crcr_database_up 0."""
        depth = queue_depth()
        if depth.pending is not None:
            yield _gauge(
                "crcr_task_queue_depth",
                "Tasks waiting to run (Celery queue on Redis, or the in-process pool).",
                depth.pending,
                backend=depth.backend,
            )
        now = clock.now()
        try:
            state = read_state(now)
        except DatabaseError as error:
            logger.warning("metrics: database unavailable", extra={"error": type(error).__name__})
            yield _gauge("crcr_database_up", "Whether the scrape could read the database.", 0)
            return
        yield _gauge("crcr_database_up", "Whether the scrape could read the database.", 1)
        yield from _job_gauges(state, now)
        yield from _reconciler_gauges(state, now)


def multiprocess_dir() -> str | None:
    """The folder of per-process counter files, when several processes serve."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def exposition() -> bytes:
    """The text a scrape returns: counters (all processes) and the scrape-time gauges."""
    state = CollectorRegistry(auto_describe=True)
    state.register(StateCollector())
    if multiprocess_dir():
        counters = CollectorRegistry()
        MultiProcessCollector(counters)
    else:
        # One process: the default registry also carries process and Python GC metrics.
        counters = REGISTRY
    return generate_latest(counters) + generate_latest(state)
