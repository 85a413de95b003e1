"""The on-call comment: one per (PR, backend), pinging the backend's on-calls on a failure.

It is edited in place, never re-posted; failures attribution judges flaky or infrastructure
do not ping (`oncall_ping_silenced`), and a comment that pinged earlier is corrected once the
failure is gone.
"""

from __future__ import annotations

import datetime as dt
import logging
import re

from django.conf import settings
from django.db.models import F

from hud import attribution, github
from hud.checks.gate import GATE_NAME
from hud.checks.scope import _effective_level, _latest_attempts, mirror_decision
from hud.checks.sync import (
    SyncOutcome,
    SyncResult,
    _failed_attempt,
    _hash,
    _run_claimed,
    _single_attempt,
    _want,
    _write,
    upstream_repo,
)
from hud.checks.text import _safe_run_url, neutralise
from hud.core import clock
from hud.github import mirror_enabled
from hud.models import Downstream, Job, Level, OncallComment

logger = logging.getLogger(__name__)

ONCALL_MARKER = "<!-- crcr-oncall:{repo} -->"
FAILED_JOBS_IN_COMMENT = 20
SILENCING_VERDICTS = frozenset({"flaky", "infra"})
_LOGIN_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")


def oncall_ping_silenced(jobs: list[Job]) -> set[int]:
    """Ids of failed jobs whose attribution verdict (flaky, infra) silences the on-call ping.

    Uses hud.attribution's `verdicts_for` (issue 7); if it is missing or fails, nothing is
    silenced: a ping too many is better than a failure nobody hears of.
    """
    try:
        verdicts = attribution.verdicts_for(jobs)
        index = attribution.index_by_job(verdicts)
    except Exception:
        logger.exception("attribution unavailable; on-call pings are not silenced")
        return set()
    return {
        job.id for job in jobs if (index.get(job.id) or {}).get("verdict") in SILENCING_VERDICTS
    }


def oncall_comment_needed(job: Job) -> bool:
    """Whether a job's report may change its backend's on-call comment on the PR."""
    if not getattr(settings, "CRCR_ONCALL_COMMENTS", True) or not job.pr_number:
        return False
    if job.status == Job.Status.COMPLETED and job.conclusion == Job.Conclusion.FAILURE:
        return mirror_decision(job)[0]
    return OncallComment.objects.filter(
        pr_number=job.pr_number, downstream_id=job.downstream_id, comment_id__isnull=False
    ).exists()


def _oncall_logins(downstream: Downstream) -> list[str]:
    logins = downstream.oncalls if isinstance(downstream.oncalls, list) else []
    return [str(login).lstrip("@") for login in logins if _LOGIN_RE.match(str(login).lstrip("@"))]


def oncall_comment_body(pr_number: int, downstream: Downstream) -> tuple[str | None, bool]:
    """(the on-call comment for a PR and backend, whether it pings); None: nothing to say.

    It speaks about the newest head SHA the backend reported on: the failed latest attempts
    there, minus those attribution judged flaky or infra. Without a failure to ping about it
    only says so, which matters when it corrects an earlier ping.
    """
    jobs = list(
        Job.objects.filter(
            pr_number=pr_number,
            downstream=downstream,
            event_type="pull_request",
            verified=True,
        ).select_related("downstream")
    )
    if not jobs:
        return None, False
    newest_sha = max(jobs, key=lambda j: (j.placed_at, j.id)).head_sha
    latest = _latest_attempts(j for j in jobs if j.head_sha == newest_sha)
    failed = [
        j
        for j in latest
        if j.status == Job.Status.COMPLETED and j.conclusion == Job.Conclusion.FAILURE
    ]
    silenced = oncall_ping_silenced(failed) if failed else set()
    pinged = [j for j in failed if j.id not in silenced]
    logins = _oncall_logins(downstream)
    marker = ONCALL_MARKER.format(repo=downstream.full_name)
    name = neutralise(downstream.full_name)
    level = _effective_level(downstream, clock.now())
    role = f"L4, blocking through `{GATE_NAME}`" if level >= Level.L4 else "L3, informational"
    not_pinged = (
        [f"{len(silenced)} failure(s) judged flaky or infrastructure are not pinged."]
        if silenced
        else []
    )
    footer = "_This comment is updated in place by the CRCR relay, not re-posted._"
    if not pinged or not logins:
        lines = [
            marker,
            f"**CRCR: {name}** ({role}): no failure needing its on-calls on {newest_sha[:12]} now.",
            *not_pinged,
            footer,
        ]
        return "\n\n".join(lines), False
    items = []
    for job in pinged[:FAILED_JOBS_IN_COMMENT]:
        line = (
            f"- {neutralise(job.workflow_name)} / {neutralise(job.job_name)}: failure "
            f"(attempt {job.run_attempt})"
        )
        url = _safe_run_url(downstream, job.workflow_url)
        if url:
            line += f" · [run]({url})"
        items.append(line)
    if len(pinged) > FAILED_JOBS_IN_COMMENT:
        items.append(f"- … and {len(pinged) - FAILED_JOBS_IN_COMMENT} more")
    # The only intended @-mentions: the backend's on-calls, listed in the allowlist.
    mentions = " ".join(f"@{login}" for login in logins)
    lines = [
        marker,
        f"**CRCR: {name} failed on this pull request** ({role})",
        f"{mentions}: please take a look.",
        f"Failed on {newest_sha[:12]}:\n" + "\n".join(items),
        *not_pinged,
        footer,
    ]
    return "\n\n".join(lines), True


def _find_comment(client: github.GitHubApp, pr_number: int, marker: str) -> dict | None:
    for comment in client.list_issue_comments(upstream_repo(), pr_number):
        user = comment.get("user") or {}
        body = str(comment.get("body") or "")
        if user.get("type") == "Bot" and body.startswith(marker):
            return comment
    return None


def _comment_step(row_id: int, now: dt.datetime) -> SyncOutcome:
    row = OncallComment.objects.select_related("downstream").get(id=row_id)
    body, pings = oncall_comment_body(row.pr_number, row.downstream)
    if body is None or (not pings and row.comment_id is None):
        # Nothing to ping about, and no earlier ping to correct.
        return SyncOutcome(SyncResult.NOT_WANTED, detail="no failure to ping about")
    desired = _hash(body)
    _want(OncallComment, row, desired, now)
    if row.comment_id is not None and row.last_body_hash == desired:
        return SyncOutcome(SyncResult.UNCHANGED)
    repo = upstream_repo()
    marker = ONCALL_MARKER.format(repo=row.downstream.full_name)
    sent = {"last_body_hash": desired, "sent_at": now, "attempts": 0, "last_error": ""}
    try:
        with github.upstream_client() as client:
            comment_id = row.comment_id
            if comment_id is None:
                existing = _find_comment(client, row.pr_number, marker)
                if existing is not None:
                    comment_id = int(existing["id"])
                    _write(
                        OncallComment,
                        row.id,
                        now,
                        comment_id=comment_id,
                        html_url=str(existing.get("html_url") or "")[:500],
                    )
                    if existing.get("body") == body:
                        _write(OncallComment, row.id, now, **sent)
                        return SyncOutcome(SyncResult.SENT, detail="adopted")
            if comment_id is None:
                with _single_attempt(client):
                    comment = client.create_issue_comment(repo, row.pr_number, body)
                _write(
                    OncallComment,
                    row.id,
                    now,
                    comment_id=int(comment["id"]),
                    html_url=str(comment.get("html_url") or "")[:500],
                    writes=F("writes") + 1,
                    **sent,
                )
                return SyncOutcome(SyncResult.SENT, detail="created")
            client.update_issue_comment(repo, comment_id, body)
            _write(OncallComment, row.id, now, writes=F("writes") + 1, **sent)
            return SyncOutcome(SyncResult.SENT, detail="updated")
    except github.GitHubError as error:
        return _failed_attempt(OncallComment, row, now, error, error.retryable, error.retry_after)
    except (github.GitHubConfigError, ValueError, KeyError, TypeError) as error:
        return _failed_attempt(OncallComment, row, now, error, False, None)


def sync_oncall_comment(pr_number: int, downstream_id: int) -> SyncOutcome:
    """Post or edit in place the one on-call comment of a (PR, backend)."""
    if not mirror_enabled() or not getattr(settings, "CRCR_ONCALL_COMMENTS", True):
        return SyncOutcome(SyncResult.NOT_WANTED, detail="on-call comments are off")
    if not pr_number:
        return SyncOutcome(SyncResult.NOT_WANTED, detail="not a pull request")
    now = clock.now()
    row, _ = OncallComment.objects.get_or_create(
        pr_number=pr_number, downstream_id=downstream_id, defaults={"created_at": now}
    )
    return _run_claimed(OncallComment, row.id, now, lambda at: _comment_step(row.id, at))
