"""The mirror's reconciler: re-enqueue whatever did not reach GitHub.

A lost enqueue, a crashed worker (its lease runs out), a GitHub outage or a sweeper close
(which enqueues nothing) all end here; the claims keep anything from being sent twice.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from django.conf import settings
from django.db.models import Exists, F, OuterRef, Q

from hud import github
from hud.checks.sync import _max_attempts
from hud.core import clock, taskqueue
from hud.github import mirror_enabled
from hud.models import (
    CheckRunMirror,
    Dispatch,
    GateCheck,
    Job,
    Level,
    OncallComment,
    RerunRequest,
    claims,
)


@dataclasses.dataclass(frozen=True)
class _Scan:
    """The bounds of one reconciler pass.

    Rows changed since `window`, settled before `settled`, with no live lease (`free`; a job's
    mirror by `expired`) and fewer than `max_attempts` attempts, at most `limit` of each kind.
    """

    now: dt.datetime
    settled: dt.datetime
    window: dt.datetime
    expired: dt.datetime
    free: Q
    max_attempts: int
    limit: int


def _scan(limit: int) -> _Scan:
    now = clock.now()
    settled = now - dt.timedelta(
        seconds=int(getattr(settings, "CRCR_MIRROR_RECONCILE_AFTER_SECONDS", 120))
    )
    window = now - dt.timedelta(
        seconds=int(getattr(settings, "CRCR_MIRROR_WINDOW_SECONDS", 3 * 86400))
    )
    expired = now - dt.timedelta(seconds=github.lease_seconds())
    free = claims.unleased("claimed_at", now)
    return _Scan(now, settled, window, expired, free, _max_attempts(), limit)


def _abandoned(model: type, scan: _Scan) -> Q:
    """Rows still under lease whose holding process is gone (hud.core.leases)."""
    return Q(id__in=claims.abandoned(model.objects.all(), "claimed_at", scan.now))


def _stale_jobs(scan: _Scan) -> list[int]:
    """Jobs whose check run GitHub does not show as it stands now."""
    # A sync whose process is gone is not waited for: nobody else will finish it.
    held = claims.abandoned(CheckRunMirror.objects.all(), "claimed_at", scan.now)
    gone = Q(mirror__id__in=held)
    return list(
        Job.objects.filter(
            verified=True,
            event_type="pull_request",
            pr_number__gt=0,
            downstream__level__gte=Level.L3,
            updated_at__gte=scan.window,
        )
        .exclude(source=Job.Source.IMPORT)
        .filter(Q(updated_at__lt=scan.settled) | Q(closed_by_sweeper=True) | gone)
        .filter(
            Q(mirror__isnull=True)
            | Q(mirror__claimed_at__isnull=True)
            | Q(mirror__claimed_at__lt=scan.expired)
            | gone
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
                & Q(mirror__attempts__lt=scan.max_attempts)
            )
        )
        .order_by("updated_at", "id")
        .values_list("id", flat=True)[: scan.limit]
    )


def _stale_gates(scan: _Scan) -> set[str]:
    """Head SHAs whose gate is unsent, due again or outdated, or dispatched with no gate yet."""
    newer_job = Job.objects.filter(
        head_sha=OuterRef("head_sha"), updated_at__gt=OuterRef("evaluated_at")
    )
    newer_dispatch = Dispatch.objects.filter(
        delivery__head_sha=OuterRef("head_sha"), dispatched_at__gt=OuterRef("evaluated_at")
    )
    gate_shas = set(
        GateCheck.objects.filter(created_at__gte=scan.window, attempts__lt=scan.max_attempts)
        .filter(scan.free | _abandoned(GateCheck, scan))
        .filter(
            ~Q(sent_hash=F("desired_hash"))
            | Q(check_run_id__isnull=True)
            | Q(resync=True)
            | Q(recheck_at__lte=scan.now)
            | Q(evaluated_at__isnull=True)
            | Exists(newer_job)
            | Exists(newer_dispatch)
        )
        .values_list("head_sha", flat=True)[: scan.limit]
    )
    has_gate = GateCheck.objects.filter(head_sha=OuterRef("delivery__head_sha"))
    gate_shas |= set(
        Dispatch.objects.filter(created_at__gte=scan.window, created_at__lt=scan.settled)
        .exclude(delivery__head_sha="")
        .filter(~Exists(has_gate))
        .values_list("delivery__head_sha", flat=True)
        .distinct()[: scan.limit]
    )
    return gate_shas


def _stale_comments(scan: _Scan) -> list[tuple[int, int]]:
    """(PR, backend) of on-call comments GitHub does not show as wanted."""
    return list(
        OncallComment.objects.filter(created_at__gte=scan.window, attempts__lt=scan.max_attempts)
        .filter(scan.free | _abandoned(OncallComment, scan))
        .filter(Q(resync=True) | ~Q(last_body_hash=F("desired_hash")))
        .exclude(desired_hash="")
        .values_list("pr_number", "downstream_id")[: scan.limit]
    )


def _stale_reruns(scan: _Scan) -> list[int]:
    """Re-runs still pending past the settle time."""
    return list(
        RerunRequest.objects.filter(
            outcome=RerunRequest.Outcome.PENDING,
            created_at__gte=scan.window,
            created_at__lt=scan.settled,
            attempts__lt=scan.max_attempts,
        )
        .filter(scan.free)
        .values_list("id", flat=True)[: scan.limit]
    )


def reconcile(limit: int = 500) -> dict[str, int]:
    """Re-enqueue check runs, gates, comments and re-runs that did not reach GitHub.

    A lost enqueue, a crashed worker (its lease runs out), a GitHub outage or a sweeper close
    (which enqueues nothing) all end here; the claims keep anything from being sent twice.
    """

    if not mirror_enabled():
        return {}
    scan = _scan(limit)
    # Each kind is enqueued before the next is read, as the tasks it starts may change rows.
    job_ids = _stale_jobs(scan)
    for job_id in job_ids:
        taskqueue.enqueue("crcr.mirror_job", job_id)
    gate_shas = _stale_gates(scan)
    for sha in sorted(gate_shas):
        taskqueue.enqueue("crcr.sync_gate", sha)
    comments = _stale_comments(scan)
    for pr_number, downstream_id in comments:
        taskqueue.enqueue("crcr.sync_oncall_comment", pr_number, downstream_id)
    reruns = _stale_reruns(scan)
    for rerun_id in reruns:
        taskqueue.enqueue("crcr.send_rerun", rerun_id)
    return {
        "check_runs": len(job_ids),
        "gates": len(gate_shas),
        "comments": len(comments),
        "reruns": len(reruns),
    }
