"""The sweeper: jobs left in progress too long are closed as `timed_out`.

A callback may never come (a runner lost, a workflow cancelled without its final step); the
periodic task closes such jobs so pages and gates do not wait forever. A late completion still
replaces the sweeper's close (`hud.ingestion.ingest`).
"""

import datetime as dt
import logging

from django.conf import settings
from django.db import transaction

from hud.core import clock
from hud.ingestion import derived
from hud.models import Job

logger = logging.getLogger(__name__)


def sweep_zombies() -> int:
    """Close jobs in_progress longer than CRCR_ZOMBIE_TIMEOUT as `timed_out` (sweeper close)."""
    now = clock.now()
    cutoff = now - dt.timedelta(seconds=settings.CRCR_ZOMBIE_TIMEOUT_SECONDS)
    closed = 0
    stale_ids = list(
        Job.objects.filter(status=Job.Status.IN_PROGRESS, placed_at__lt=cutoff).values_list(
            "id", flat=True
        )[:10_000]
    )
    for job_id in stale_ids:
        with transaction.atomic():
            job = (
                Job.objects.select_for_update()
                .filter(id=job_id, status=Job.Status.IN_PROGRESS)
                .first()
            )
            if job is None:
                continue
            job.status = Job.Status.COMPLETED
            job.conclusion = Job.Conclusion.TIMED_OUT
            job.closed_by_sweeper = True
            job.completed_received_at = now
            job.updated_at = now
            job.save(
                update_fields=[
                    "status",
                    "conclusion",
                    "closed_by_sweeper",
                    "completed_received_at",
                    "updated_at",
                ]
            )
            derived.refresh_job(job)
            closed += 1
    if closed:
        logger.info("sweeper closed jobs", extra={"closed": closed})
    return closed
