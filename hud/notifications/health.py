"""Backend health: stale backends, silent ones, and repeated L4 gate failures.

`check_backends` is the periodic check of listed L2+ backends; `notify_gate_failure` and
`notify_gate_decision` are also what the merge gate (hud.checks.mirror) calls when a backend
fails it. Each spell (a quiet period, a silent streak, a failing streak) is one event.
"""

import datetime as dt
from typing import Any

from django.conf import settings
from django.db.models import Max

from hud import levels
from hud.core import clock
from hud.models import Downstream, Job, Level
from hud.notifications.emission import emit_safely
from hud.notifications.events import GATE_FAILURES, Event, silent_event, stale_event
from hud.reads import selectors

# What fails the merge gate (hud.checks.mirror): timed out and cancelled jobs do not block.
FAILING_CONCLUSIONS = (Job.Conclusion.FAILURE,)


def stale_after() -> dt.timedelta:
    """How long without a result makes a backend stale (CRCR_NOTIFY_STALE_HOURS)."""
    return dt.timedelta(hours=settings.CRCR_NOTIFY_STALE_HOURS)


def silent_streak(downstream: Downstream, now: dt.datetime) -> tuple[int, int] | None:
    """(unanswered dispatches, id of the last answered one or 0) when the latest N are silent."""
    wanted = settings.CRCR_NOTIFY_SILENT_DISPATCHES
    if wanted < 1:
        return None
    settled_before = now - selectors.no_response_after()
    sent = selectors.sent_to_l2_plus(now - dt.timedelta(days=365), settled_before).filter(
        downstream=downstream
    )
    latest = list(sent.order_by("-dispatched_at", "-id").values("id", "answered")[:wanted])
    if len(latest) < wanted or any(row["answered"] for row in latest):
        return None
    # The last answered dispatch names the silent spell, so it is notified once.
    answered = sent.filter(answered=True).order_by("-dispatched_at", "-id").first()
    return wanted, answered.pk if answered else 0


def failing_shas(downstream: Downstream, limit: int = 2000) -> list[tuple[str, bool]]:
    """The backend's recent PR head SHAs, newest first, and whether each failed.

    A SHA fails when the latest attempt of any of its jobs failed (as the merge gate reads it).
    """
    rows = (
        Job.objects.filter(
            downstream=downstream, event_type="pull_request", status=Job.Status.COMPLETED
        )
        .order_by("-placed_at", "-id")
        .values_list("head_sha", "workflow_name", "job_name", "run_attempt", "conclusion")[:limit]
    )
    order: dict[str, None] = {}  # insertion-ordered: newest first
    latest: dict[tuple[str, str, str], tuple[int, str]] = {}
    for head_sha, workflow, job_name, attempt, conclusion in rows:
        order.setdefault(head_sha)
        key = (head_sha, workflow, job_name)
        if key not in latest or attempt > latest[key][0]:
            latest[key] = (attempt, conclusion)
    failed = {
        key[0] for key, (_, conclusion) in latest.items() if conclusion in FAILING_CONCLUSIONS
    }
    return [(sha, sha in failed) for sha in order]


def notify_gate_failure(
    downstream: Downstream, head_sha: str = "", pr_number: int = 0
) -> list[int]:
    """Notify when an L4 backend failed its last CRCR_NOTIFY_GATE_FAILURES PR SHAs in a row.

    The entry point for the merge gate (hud.checks.mirror) to call when a backend fails the gate on
    `head_sha`; the periodic check calls it for every L4 backend too. One event per failing
    streak, named by the streak's first SHA.
    """
    wanted = settings.CRCR_NOTIFY_GATE_FAILURES
    if wanted < 1 or levels.effective_level(downstream) != Level.L4:
        return []
    streak = []
    for sha, failed in failing_shas(downstream):
        if not failed:
            break
        streak.append(sha)
    if len(streak) < wanted:
        return []
    latest = head_sha or streak[0]
    where = f" (latest on PR #{pr_number})" if pr_number else ""
    event = Event(
        key=f"gate:{downstream.pk}:{streak[-1]}",
        event_type=GATE_FAILURES,
        downstream=downstream,
        subject=f"[CRCR] {downstream.full_name}: {len(streak)} failing PR commits in a row at L4",
        lines=(
            f"{downstream.full_name} is L4 (blocking) and failed its jobs on the last "
            f"{len(streak)} PR head commits{where}; latest {latest[:12]}.",
            "Failing L4 results block merges: look for an infrastructure problem, or ask an "
            "admin for a temporary override.",
        ),
        path=f"/crcr/commit/{latest}" if latest else f"/crcr/{downstream.full_name}",
    )
    return emit_safely(lambda: event)


def notify_gate_decision(decision: dict[str, Any]) -> list[int]:
    """Hook for hud.checks: pass a failing `gate_decision` to `notify_gate_failure` per backend."""
    if decision.get("state") != "failure":
        return []
    names = sorted({item["downstream"] for item in decision.get("blocking", [])})
    pr_numbers = decision.get("pr_numbers") or [0]
    created: list[int] = []
    for downstream in Downstream.objects.filter(full_name__in=names):
        created += notify_gate_failure(downstream, decision.get("head_sha", ""), pr_numbers[-1])
    return created


def check_backends(now: dt.datetime | None = None) -> dict[str, int]:
    """The periodic health check of listed L2+ backends: stale, silent, repeated gate failures."""
    now = now or clock.now()
    counts = {"stale": 0, "silent": 0, "gate_failures": 0}
    backends = list(Downstream.objects.filter(delisted=False, level__gte=Level.L2))
    last_results = dict(
        Job.objects.filter(downstream__in=backends)
        .values("downstream_id")
        .annotate(last=Max("placed_at"))
        .values_list("downstream_id", "last")
    )
    for backend in backends:
        if levels.effective_level(backend, now) < Level.L2:
            continue  # held at L1 by an override: its results are ignored, silence is expected
        last = last_results.get(backend.pk)
        if last is not None and now - last > stale_after():
            counts["stale"] += len(emit_safely(lambda b=backend, t=last: stale_event(b, t, now)))
        streak = silent_streak(backend, now)
        if streak is not None:
            counts["silent"] += len(emit_safely(lambda b=backend, s=streak: silent_event(b, *s)))
        counts["gate_failures"] += len(notify_gate_failure(backend))
    return counts
