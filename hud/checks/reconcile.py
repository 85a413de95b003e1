"""The mirror's reconciler: re-enqueue whatever did not reach GitHub.

A lost enqueue, a crashed worker (its lease runs out), a GitHub outage or a sweeper close
(which enqueues nothing) all end here; the claims keep anything from being sent twice.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db.models import Exists, F, OuterRef, Q

from hud import github
from hud.checks.sync import _max_attempts
from hud.core import clock, taskqueue
from hud.github import mirror_enabled
from hud.models import Dispatch, GateCheck, Job, Level, OncallComment, RerunRequest, claims


def reconcile(limit: int = 500) -> dict[str, int]:
    """Re-enqueue check runs, gates, comments and re-runs that did not reach GitHub.

    A lost enqueue, a crashed worker (its lease runs out), a GitHub outage or a sweeper close
    (which enqueues nothing) all end here; the claims keep anything from being sent twice.
    """

    if not mirror_enabled():
        return {}
    now = clock.now()
    settled = now - dt.timedelta(
        seconds=int(getattr(settings, "CRCR_MIRROR_RECONCILE_AFTER_SECONDS", 120))
    )
    window = now - dt.timedelta(
        seconds=int(getattr(settings, "CRCR_MIRROR_WINDOW_SECONDS", 3 * 86400))
    )
    expired = now - dt.timedelta(seconds=github.lease_seconds())
    free = claims.unleased("claimed_at", now)
    max_attempts = _max_attempts()

    job_ids = list(
        Job.objects.filter(
            verified=True,
            event_type="pull_request",
            pr_number__gt=0,
            downstream__level__gte=Level.L3,
            updated_at__gte=window,
        )
        .exclude(source=Job.Source.IMPORT)
        .filter(Q(updated_at__lt=settled) | Q(closed_by_sweeper=True))
        .filter(
            Q(mirror__isnull=True)
            | Q(mirror__claimed_at__isnull=True)
            | Q(mirror__claimed_at__lt=expired)
        )
        .filter(
            # Never synced, or the job moved on since (a sweeper close, a lost enqueue) ...
            Q(mirror__isnull=True)
            | Q(mirror__source_updated_at__isnull=True)
            | Q(mirror__source_updated_at__lt=F("updated_at"))
            # ... or a sync that did not finish (outage, crash), while attempts remain.
            | (
                (
                    Q(mirror__resync=True)
                    | (Q(mirror__wanted=True) & ~Q(mirror__sent_hash=F("mirror__desired_hash")))
                )
                & Q(mirror__attempts__lt=max_attempts)
            )
        )
        .order_by("updated_at", "id")
        .values_list("id", flat=True)[:limit]
    )
    for job_id in job_ids:
        taskqueue.enqueue("crcr.mirror_job", job_id)

    newer_job = Job.objects.filter(
        head_sha=OuterRef("head_sha"), updated_at__gt=OuterRef("evaluated_at")
    )
    newer_dispatch = Dispatch.objects.filter(
        delivery__head_sha=OuterRef("head_sha"), dispatched_at__gt=OuterRef("evaluated_at")
    )
    gate_shas = set(
        GateCheck.objects.filter(created_at__gte=window, attempts__lt=max_attempts)
        .filter(free)
        .filter(
            ~Q(sent_hash=F("desired_hash"))
            | Q(check_run_id__isnull=True)
            | Q(resync=True)
            | Q(recheck_at__lte=now)
            | Q(evaluated_at__isnull=True)
            | Exists(newer_job)
            | Exists(newer_dispatch)
        )
        .values_list("head_sha", flat=True)[:limit]
    )
    has_gate = GateCheck.objects.filter(head_sha=OuterRef("delivery__head_sha"))
    gate_shas |= set(
        Dispatch.objects.filter(created_at__gte=window, created_at__lt=settled)
        .exclude(delivery__head_sha="")
        .filter(~Exists(has_gate))
        .values_list("delivery__head_sha", flat=True)
        .distinct()[:limit]
    )
    for sha in sorted(gate_shas):
        taskqueue.enqueue("crcr.sync_gate", sha)

    comments = list(
        OncallComment.objects.filter(created_at__gte=window, attempts__lt=max_attempts)
        .filter(free)
        .filter(Q(resync=True) | ~Q(last_body_hash=F("desired_hash")))
        .exclude(desired_hash="")
        .values_list("pr_number", "downstream_id")[:limit]
    )
    for pr_number, downstream_id in comments:
        taskqueue.enqueue("crcr.sync_oncall_comment", pr_number, downstream_id)

    reruns = list(
        RerunRequest.objects.filter(
            outcome=RerunRequest.Outcome.PENDING,
            created_at__gte=window,
            created_at__lt=settled,
            attempts__lt=max_attempts,
        )
        .filter(free)
        .values_list("id", flat=True)[:limit]
    )
    for rerun_id in reruns:
        taskqueue.enqueue("crcr.send_rerun", rerun_id)
    return {
        "check_runs": len(job_ids),
        "gates": len(gate_shas),
        "comments": len(comments),
        "reruns": len(reruns),
    }
