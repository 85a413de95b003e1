"""How far each mirrored thing got on GitHub, for the pages and the API (reads only).

`gate_state` is the gate decision plus its check run's sync; `pr_mirror_state` is what the PR
page shows of a pull request on GitHub: its newest head SHA's gate and each attempt's check run.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from hud.checks.check_runs import check_run_name
from hud.checks.gate import gate_decision, gate_fields
from hud.checks.scope import _pr_labels, device_label
from hud.checks.sync import _hash, _max_attempts
from hud.checks.text import _iso
from hud.core import clock
from hud.github import mirror_enabled
from hud.levels import effective_levels
from hud.models import CheckRunMirror, Delivery, Dispatch, GateCheck, Job, Level

NOT_MIRRORED_YET = "not mirrored yet"


def _oldest_change(changes: Iterable[dt.datetime | None], sent_at: dt.datetime | None) -> Any:
    """The earliest of `changes` that GitHub has not acknowledged (after `sent_at`), if any."""
    unsent = [moment for moment in changes if moment and (sent_at is None or moment > sent_at)]
    return min(unsent, default=None)


def _sync_info(
    row: Any,
    current: bool,
    changes: Iterable[dt.datetime | None] = (),
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """How far a mirrored row got on GitHub, for pages and the API.

    `sent` only when GitHub acknowledged the state the row must show now (`current`: the
    caller compared it with what is stored now, since a worker that is down has not even
    recomputed the row); otherwise `pending` with the age of the oldest change GitHub has not
    seen (`changes`: when what the row shows changed), or `failed` once attempts ran out.
    """
    sent_at = row.sent_at if row is not None else None
    if row is None or (getattr(row, "wanted", True) is False and row.check_run_id is None):
        sync = "pending" if current is False else "not_mirrored"
    elif current and row.check_run_id is not None and row.sent_hash == row.desired_hash:
        sync = "sent"
    elif current and row.attempts >= _max_attempts():
        sync = "failed"
    else:
        sync = "pending"
    pending_since = None
    if sync == "pending":
        pending_since = _oldest_change(changes, sent_at) or (row.created_at if row else None)
    now = now or clock.now()
    return {
        "sync": sync,
        "check_run_id": row.check_run_id if row else None,
        "html_url": row.html_url if row else "",
        "sent_at": _iso(sent_at),
        "last_sent_state": row.last_sent_state if row else None,
        "last_error": row.last_error if row else "",
        "reason": getattr(row, "skip_reason", ""),
        "pending_since": _iso(pending_since),
        "pending_seconds": max((now - pending_since).total_seconds(), 0.0)
        if pending_since
        else None,
    }


def gate_state(head_sha: str, now: dt.datetime | None = None) -> dict[str, Any]:
    """`gate_decision` plus how far the `crcr/gate` check run got on GitHub (`check_run`).

    The gate is `sent` only when GitHub shows the decision as it stands now, not merely the
    last one a worker computed.
    """
    now = now or clock.now()
    decision = gate_decision(head_sha, now)
    gate = GateCheck.objects.filter(head_sha=head_sha).first()
    wanted = mirror_enabled() and Dispatch.objects.filter(delivery__head_sha=head_sha).exists()
    if not wanted and gate is None:
        decision["check_run"] = _sync_info(None, current=True)
        return decision
    current = gate is not None and gate.sent_hash == _hash(gate_fields(decision))
    changes = list(
        Job.objects.filter(head_sha=head_sha).values_list(
            "in_progress_received_at", "completed_received_at", "updated_at"
        )
    )
    dispatched = Dispatch.objects.filter(delivery__head_sha=head_sha).values_list(
        "created_at", flat=True
    )
    recheck = gate.recheck_at if gate is not None and gate.recheck_at else None
    moments = [moment for row in changes for moment in row]
    moments += [*dispatched, recheck if recheck and recheck <= now else None]
    decision["check_run"] = _sync_info(gate, current, moments, now)
    return decision


def _not_mirrored_reason(job: Job, level: int, labels: set[str]) -> str:
    """Why a job has no check run, without a query (for the PR page)."""
    if not job.verified:
        return "unverified: its delivery is not known here, so it is never mirrored"
    if level < Level.L3:
        return f"L{level}: check runs start at L3"
    label = device_label(job.downstream)
    if level == Level.L3 and (label is None or label.lower() not in labels):
        return f"L3: the pull request does not carry the label {label or '(no device)'}"
    return NOT_MIRRORED_YET


def _head_shas(pr_number: int) -> list[str]:
    """The PR's head SHAs, newest first, from its stored pull_request deliveries."""
    deliveries = list(
        Delivery.objects.filter(pr_number=pr_number, event_type="pull_request")
        .exclude(head_sha="")
        .order_by("-received_at", "-id")
        .values_list("head_sha", flat=True)
    )
    head_shas: list[str] = []
    for sha in deliveries:
        if sha not in head_shas:
            head_shas.append(sha)
    return head_shas


def _latest_gate(head_shas: list[str], now: dt.datetime) -> dict[str, Any] | None:
    """`gate_state` of the newest head SHA something was dispatched for; None for none."""
    dispatched = set(
        Dispatch.objects.filter(delivery__head_sha__in=head_shas).values_list(
            "delivery__head_sha", flat=True
        )
    )
    newest = next((sha for sha in head_shas if sha in dispatched), None)
    return None if newest is None else gate_state(newest, now)


def _check_run(
    job: Job,
    row: CheckRunMirror | None,
    level: int,
    labels: set[str],
    mirroring: bool,
    now: dt.datetime,
) -> dict[str, Any]:
    """One job's check run as the PR page shows it: the job, and how far its run (`row`) got."""
    reason = _not_mirrored_reason(job, level, labels)
    # Current when the row was computed from the job's latest state, or nothing is wanted.
    unwanted = not mirroring or reason != NOT_MIRRORED_YET
    seen = row is not None and row.source_updated_at is not None
    current = (seen and row.source_updated_at >= job.updated_at) or (
        unwanted and (row is None or row.check_run_id is None)
    )
    changes = (job.in_progress_received_at, job.completed_received_at, job.updated_at)
    info = _sync_info(row, current, changes, now)
    if info["sync"] == "not_mirrored" and not info.get("reason"):
        info["reason"] = reason
    return {
        "job_id": job.id,
        "name": check_run_name(job),
        "downstream": job.downstream.full_name,
        "level": level,
        "head_sha": job.head_sha,
        "status": job.status,
        "conclusion": job.conclusion or None,
        "run_attempt": job.run_attempt,
        **info,
    }


def _check_runs(pr_number: int, jobs: list[Job], now: dt.datetime) -> list[dict[str, Any]]:
    """Each of the PR's pull_request attempts among `jobs`, in their order, with its check run
    (the mirror rows of the PR's jobs in one read, joined on the PR: no list of ids)."""
    jobs = [job for job in jobs if job.event_type == "pull_request"]
    rows = {
        row.job_id: row
        for row in CheckRunMirror.objects.filter(
            job__pr_number=pr_number, job__event_type="pull_request"
        )
    }
    levels = effective_levels({j.downstream_id: j.downstream for j in jobs}.values(), now)
    labels = {label.lower() for label in _pr_labels(pr_number)}
    mirroring = mirror_enabled()
    return [
        _check_run(job, rows.get(job.id), levels[job.downstream_id], labels, mirroring, now)
        for job in jobs
    ]


def pr_mirror_state(
    pr_number: int, jobs: list[Job], now: dt.datetime | None = None
) -> dict[str, Any]:
    """What the PR page shows of the PR on GitHub, as plain dicts: the newest dispatched head
    SHA's gate (None when nothing was dispatched for the PR) and the check run of each
    attempt. `jobs` are the PR's attempts as the page read them (with their downstream),
    newest first: they are not read again.
    """
    now = now or clock.now()
    head_shas = _head_shas(pr_number)
    return {
        "pr_number": pr_number,
        "head_sha": head_shas[0] if head_shas else None,
        "gate": _latest_gate(head_shas, now),
        "check_runs": _check_runs(pr_number, jobs, now),
    }
