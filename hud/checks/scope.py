"""Which jobs reach GitHub (CRCR.md, "Levels"), and which attempt of a job stands for it.

L4 backends always, L3 backends when the pull request carries `ciflow/crcr/<device>`; never
unverified, imported or non-pull-request results. `_latest_attempts` picks each logical job's
latest attempt by hud.stats' ordering.
"""

from __future__ import annotations

import datetime as dt
import operator
from collections.abc import Iterable

from hud import stats
from hud.core import clock
from hud.levels import effective_levels
from hud.models import Delivery, Downstream, Job, Level

LABEL_PREFIX = "ciflow/crcr/"
# hud.stats' logical job and attempt order, read off Job rows (its `downstream` is the id).
_LOGICAL_JOB = operator.attrgetter(
    *("downstream_id" if name == "downstream" else name for name in stats.LOGICAL_JOB_KEY)
)
_ATTEMPT = operator.attrgetter(*stats.ATTEMPT_ORDER)


def _pr_labels(pr_number: int) -> list[str]:
    """The PR's labels as of its latest stored pull_request delivery."""
    delivery = (
        Delivery.objects.filter(event_type="pull_request", pr_number=pr_number)
        .order_by("-received_at", "-id")
        .only("labels")
        .first()
    )
    return [str(label) for label in (delivery.labels or [])] if delivery else []


def device_label(downstream: Downstream) -> str | None:
    """The label that turns an L3 backend's check runs on (`ciflow/crcr/<device>`)."""
    return f"{LABEL_PREFIX}{downstream.device}" if downstream.device else None


def _effective_level(downstream: Downstream, now: dt.datetime) -> int:
    return effective_levels([downstream], now)[downstream.id]


def mirror_decision(job: Job, now: dt.datetime | None = None) -> tuple[bool, str, int]:
    """(mirror this job?, why not, the backend's level in force) — CRCR.md, "Levels"."""
    now = now or clock.now()
    level = _effective_level(job.downstream, now)
    if not job.verified:
        return False, "unverified: its delivery is not known here, so it is never mirrored", level
    if job.source == Job.Source.IMPORT:
        return False, "imported history is not mirrored", level
    if job.event_type != "pull_request" or not job.pr_number or not job.head_sha:
        return False, "not a pull request result", level
    if level < Level.L3:
        return False, f"L{level}: check runs start at L3", level
    if level == Level.L3:
        label = device_label(job.downstream)
        if label is None:
            return False, "L3 backend without a device: no label can turn its check runs on", level
        if label.lower() not in {name.lower() for name in _pr_labels(job.pr_number)}:
            return False, f"L3: the pull request does not carry the label {label}", level
    return True, "", level


def _latest_attempts(jobs: Iterable[Job]) -> list[Job]:
    """The latest attempt of each logical job, by hud.stats' key and ordering (one definition)."""
    latest: dict[tuple, Job] = {}
    for job in jobs:
        key = _LOGICAL_JOB(job)
        current = latest.get(key)
        if current is None or _ATTEMPT(job) > _ATTEMPT(current):
            latest[key] = job
    return sorted(latest.values(), key=lambda j: (j.downstream_id, j.workflow_name, j.job_name))
