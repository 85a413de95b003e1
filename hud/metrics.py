"""Prometheus metrics: event counters kept by the web processes, gauges read at scrape time.

Two kinds, chosen by where the truth lives:

* Answers (HTTP codes, ingestion outcomes) happen in the web processes and are not stored
  anywhere else, so they are prometheus-client counters. Under gunicorn several processes
  answer; with `PROMETHEUS_MULTIPROC_DIR` set, prometheus-client writes each process's counters
  to files there and a scrape adds them up (gunicorn.conf.py empties the folder at start and
  marks dead workers). Without it (runserver, tests) they live in memory.
* State (jobs in progress, pending dispatches and their age, sweeper closes, queue depth) is
  read from PostgreSQL and the broker when scraped, so every web process and every host reports
  the same numbers no matter which process did the work (the sweeper runs in a Celery worker).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Min
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import REGISTRY, Collector

from hud import clock
from hud.models import Dispatch, Job

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
    from hud import tasks

    pool = tasks._pool
    pending = pool._work_queue.qsize() if pool is not None else 0
    return QueueDepth("inprocess", pending)


def _gauge(name: str, documentation: str, value: float, **labels: str) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


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
            in_progress = Job.objects.filter(status=Job.Status.IN_PROGRESS).count()
            pending = Dispatch.objects.filter(outcome=Dispatch.Outcome.PENDING)
            pending_count = pending.count()
            oldest = pending.aggregate(oldest=Min("created_at"))["oldest"]
            # Bounded by placed_at (indexed) so a scrape never scans all jobs: the sweeper closes
            # a job zombie-timeout after it began, give or take a sweeper outage of a week.
            timeout = dt.timedelta(seconds=settings.CRCR_ZOMBIE_TIMEOUT_SECONDS)
            horizon = now - SWEEPER_WINDOW - timeout - SWEEPER_OUTAGE_MARGIN
            swept = Job.objects.filter(
                placed_at__gte=horizon,
                closed_by_sweeper=True,
                completed_received_at__gte=now - SWEEPER_WINDOW,
            ).count()
        except DatabaseError as error:
            logger.warning("metrics: database unavailable", extra={"error": type(error).__name__})
            yield _gauge("crcr_database_up", "Whether the scrape could read the database.", 0)
            return
        yield _gauge("crcr_database_up", "Whether the scrape could read the database.", 1)
        yield _gauge(
            "crcr_jobs_in_progress", "Jobs whose latest state is in_progress.", in_progress
        )
        yield _gauge(
            "crcr_dispatches_pending", "Dispatches not yet sent (or being retried).", pending_count
        )
        lag = max((now - oldest).total_seconds(), 0.0) if oldest else 0.0
        yield _gauge(
            "crcr_dispatch_oldest_pending_age_seconds",
            "Age of the oldest pending dispatch: how far the sender and reconciler lag.",
            lag,
        )
        yield _gauge(
            "crcr_sweeper_closed_jobs_24h",
            "Jobs the sweeper closed as timed_out in the last 24 hours (and still closed so).",
            swept,
        )


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
