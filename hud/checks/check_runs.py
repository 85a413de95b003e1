"""Per-job check runs on the upstream PR: name, body, and the sync of one job's run.

One check run per job (per attempt row), for L4 always and for L3 when the PR carries
`ciflow/crcr/<device>` (`hud.checks.scope`); created when the job first reports and updated
in place when it completes. Per-job check runs carry the raw conclusion and are informational:
merges are gated by `crcr/gate` (`hud.checks.gate`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings

from hud.checks.gate import GATE_NAME
from hud.checks.scope import _latest_attempts, device_label, mirror_decision
from hud.checks.sync import SyncOutcome, SyncResult, _run_claimed, _sync_check_run, _write
from hud.checks.text import MESSAGE_CHARS, _iso, _safe_run_url, neutralise
from hud.core import clock, taskqueue
from hud.github import mirror_enabled
from hud.models import CheckRunMirror, FailedTest, Job, Level

CHECK_NAME_PREFIX = "crcr/"
FAILED_TESTS_IN_SUMMARY = 10


def check_run_name(job: Job) -> str:
    """`crcr/<owner>/<repo>/<workflow>/<job>` (CRCR.md, "Check runs on the upstream PR")."""
    return f"{CHECK_NAME_PREFIX}{job.downstream.full_name}/{job.workflow_name}/{job.job_name}"


def external_id(job: Job) -> str:
    """`<run_id>:<pr_number>`: how a re-requested check run finds its downstream run."""
    return f"{job.run_id}:{job.pr_number}"


def _level_line(job: Job, level: int) -> str:
    if level >= Level.L4:
        return (
            "L4. This check shows the raw result and is informational: merges are gated by "
            f"`{GATE_NAME}`."
        )
    label = device_label(job.downstream) or "(no device)"
    return f"L3, informational: shown because the pull request carries `{label}`."


def _tests_line(job: Job) -> str | None:
    counts = (job.tests_passed, job.tests_failed, job.tests_skipped, job.tests_total)
    if all(value is None for value in counts):
        return None
    parts = [
        f"{value} {word}"
        for value, word in zip(counts, ("passed", "failed", "skipped", "total"), strict=True)
        if value is not None
    ]
    return "**Tests:** " + " · ".join(parts)


def _failed_test_lines(job: Job, tests: list[FailedTest]) -> list[str]:
    if not tests:
        return []
    total = job.tests_failed if job.tests_failed is not None else len(tests)
    more = " or more" if job.failed_tests_truncated else ""
    lines = [
        f"**Failed tests** (first {min(len(tests), FAILED_TESTS_IN_SUMMARY)} of {total}{more}):"
    ]
    for test in tests[:FAILED_TESTS_IN_SUMMARY]:
        name = f"{test.classname}.{test.name}" if test.classname else test.name
        message = (test.message or "").strip().splitlines()[:1]
        line = f"- {neutralise(name)}"
        if message:
            line += f": {neutralise(message[0], MESSAGE_CHARS)}"
        lines.append(line)
    return lines


def check_run_summary(job: Job, level: int, tests: list[FailedTest]) -> str:
    """The check run's markdown summary: backend, job, test counts, first failed tests, links."""
    lines = [
        f"**Backend:** {neutralise(job.downstream.full_name)} ({_level_line(job, level)})",
        f"**Job:** {neutralise(job.workflow_name)} / {neutralise(job.job_name)} · run "
        f"{job.run_id}, attempt {job.run_attempt}",
    ]
    if job.status == Job.Status.COMPLETED:
        result = f"**Result:** {job.conclusion or 'unknown'}"
        if job.closed_by_sweeper:
            hours = settings.CRCR_ZOMBIE_TIMEOUT_SECONDS / 3600
            result += f" (no result within {hours:g} h: closed by the relay's sweeper)"
        lines.append(result)
        tests_line = _tests_line(job)
        if tests_line:
            lines.append(tests_line)
        lines.extend(_failed_test_lines(job, tests))
    else:
        lines.append("**Result:** in progress")
    links = []
    run_url = _safe_run_url(job.downstream, job.workflow_url)
    if run_url:
        links.append(f"[downstream run]({run_url})")
    public = getattr(settings, "CRCR_PUBLIC_URL", "")
    if public:
        links.append(f"[CRCR HUD for this pull request]({public}/crcr/pr/{job.pr_number})")
    if links:
        lines.append("**Links:** " + " · ".join(links))
    return "\n\n".join(lines)


def check_run_fields(job: Job, level: int) -> dict[str, Any]:
    """The GitHub check-run body for a job in its current state."""
    tests = list(job.failed_tests.order_by("id")[:FAILED_TESTS_IN_SUMMARY])
    fields: dict[str, Any] = {
        "name": check_run_name(job),
        "head_sha": job.head_sha,
        "external_id": external_id(job),
    }
    run_url = _safe_run_url(job.downstream, job.workflow_url)
    if run_url:
        fields["details_url"] = run_url
    summary = check_run_summary(job, level, tests)
    # The server's receipt time: it never changes once set, so it never costs an update.
    started = _iso(job.in_progress_received_at)
    if started:
        fields["started_at"] = started
    if job.status == Job.Status.COMPLETED:
        conclusion = job.conclusion or "neutral"
        fields.update(
            status="completed",
            conclusion=conclusion,
            completed_at=_iso(job.reported_completed_at or job.completed_received_at),
            output={"title": conclusion, "summary": summary},
        )
    else:
        fields.update(status="in_progress", output={"title": "In progress", "summary": summary})
    return fields


def _mirror_row(job: Job, now: dt.datetime) -> CheckRunMirror:
    row, _ = CheckRunMirror.objects.get_or_create(job=job, defaults={"created_at": now})
    return row


def _job_step(mirror_id: int, now: dt.datetime) -> SyncOutcome:
    mirror = CheckRunMirror.objects.select_related("job__downstream").get(id=mirror_id)
    job = mirror.job
    wanted, reason, level = mirror_decision(job, now)
    # A check run already on GitHub is kept up to date even if the label or level went away.
    started = mirror.check_run_id is not None or mirror.create_attempted_at is not None
    if not wanted and not started:
        _write(
            CheckRunMirror,
            mirror.id,
            now,
            wanted=False,
            skip_reason=reason[:300],
            source_updated_at=job.updated_at,
        )
        return SyncOutcome(SyncResult.NOT_WANTED, detail=reason)
    fields = check_run_fields(job, level)
    return _sync_check_run(
        CheckRunMirror,
        mirror,
        fields,
        now,
        wanted=True,
        skip_reason="",
        name=fields["name"][:600],
        head_sha=job.head_sha,
        source_updated_at=job.updated_at,
    )


def sync_job(job_id: int) -> SyncOutcome:
    """Bring one job's check run on GitHub to the job's current state (create or update)."""
    if not mirror_enabled():
        return SyncOutcome(SyncResult.NOT_WANTED, detail="check runs are not configured")
    now = clock.now()
    job = Job.objects.select_related("downstream").filter(id=job_id).first()
    if job is None:
        return SyncOutcome(SyncResult.NOT_WANTED, detail="no such job")
    wanted, reason, _ = mirror_decision(job, now)
    existing = CheckRunMirror.objects.filter(job=job).first()
    if not wanted and existing is None:
        # Recorded so the reconciler does not pick the job up again until it changes.
        CheckRunMirror.objects.get_or_create(
            job=job,
            defaults={
                "created_at": now,
                "skip_reason": reason[:300],
                "source_updated_at": job.updated_at,
            },
        )
        return SyncOutcome(SyncResult.NOT_WANTED, detail=reason)
    mirror = existing or _mirror_row(job, now)
    return _run_claimed(CheckRunMirror, mirror.id, now, lambda at: _job_step(mirror.id, at))


def backfill(head_sha: str) -> int:
    """After a `ciflow/crcr/*` label: enqueue the check runs of jobs already on that head SHA."""

    if not mirror_enabled() or not head_sha:
        return 0
    jobs = Job.objects.filter(
        head_sha=head_sha,
        verified=True,
        event_type="pull_request",
        downstream__level__gte=Level.L3,
    )
    latest = sorted(_latest_attempts(jobs), key=lambda job: job.id)
    for job in latest:
        taskqueue.enqueue("crcr.mirror_job", job.id)
    return len(latest)
