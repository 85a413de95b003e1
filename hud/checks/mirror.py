"""Job → check run on the upstream PR; the `crcr/gate` merge gate; re-runs; on-call comments.

What reaches GitHub (CRCR.md, "Check runs on the upstream PR", "L4 blocking"):

* one check run per job (per attempt row), for L4 always and for L3 when the PR carries
  `ciflow/crcr/<device>`; created when the job first reports and updated in place when it
  completes. Per-job check runs carry the raw conclusion and are informational;
* one `crcr/gate` check per dispatched head SHA that applies the L4 rule (`gate_decision`, the
  same function `GET /api/v1/gate/<sha>` answers with);
* re-runs of downstream runs when a reviewer re-requests a check run or the check suite;
* one comment per (PR, backend) pinging the backend's on-calls on a failure, edited in place.

Convergence follows relay part 1: every row that mirrors something (CheckRunMirror, GateCheck,
OncallComment, RerunRequest) stores what GitHub should show (`desired_hash`) and what it
confirmed (`sent_hash`). A sync first claims its row with a conditional UPDATE (a lease), so
one worker at a time talks to GitHub for it; a sync that finds the row claimed marks it
`resync` and the holder takes one more pass before releasing. Creating is not idempotent on
GitHub, so it is never retried blindly: the row records that a create was attempted, creates go
through a client without in-client retries, and a later attempt first looks the run up by name
(`list_check_runs_for_ref`) and adopts it. `reconcile` re-enqueues whatever a lost enqueue, a
crashed worker or a GitHub outage left behind, so each PR converges to exactly one check run per
job and per gate, with one create and, per job, at most one update.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import enum
import hashlib
import json
import logging
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef, Q
from prometheus_client import Counter

from hud import attribution, github, levels, notifications
from hud.core import clock, taskqueue
from hud.core.payload import workflow_url_pattern
from hud.github import mirror_enabled
from hud.levels import effective_levels
from hud.models import (
    CheckRunMirror,
    Delivery,
    Dispatch,
    Downstream,
    FailedTest,
    GateCheck,
    Job,
    Level,
    OncallComment,
    RerunRequest,
    claims,
)
from hud.reads import selectors

logger = logging.getLogger(__name__)

CHECK_NAME_PREFIX = "crcr/"
GATE_NAME = "crcr/gate"
LABEL_PREFIX = "ciflow/crcr/"
ONCALL_MARKER = "<!-- crcr-oncall:{repo} -->"
FAILED_TESTS_IN_SUMMARY = 10
FAILED_JOBS_IN_COMMENT = 20
TEXT_CHARS = 300
MESSAGE_CHARS = 200
ERROR_CHARS = 500
MAX_PASSES = 3
ZWJ = "\u200d"
NOT_MIRRORED_YET = "not mirrored yet"
SILENCING_VERDICTS = frozenset({"flaky", "infra"})
PASSED_CONCLUSIONS = frozenset({"success", "skipped", "neutral"})
NON_BLOCKING_CONCLUSIONS = frozenset({"cancelled", "timed_out"})
_LOGIN_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")
_EXTERNAL_ID_RE = re.compile(r"^(\d{1,18}):(\d{1,10})$")
# Markdown punctuation that could start emphasis, code, links, images, tables or headings.
_MARKDOWN_RE = re.compile(r"([\\`*_{}\[\]()!#|~])")
_SCHEME_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{1,20}):(?=//)")
_WWW_RE = re.compile(r"(?i)\bwww\.")

GATE_RULE = (
    "Expected: every L4 backend dispatched for this commit, each with the jobs it ran on its "
    "recent commits. A failure on the latest attempt of any expected L4 job fails the gate. "
    "Otherwise the gate waits while an expected job is running (the sweeper closes a job "
    "silent for {zombie} as timed out) or has not started within {settle} of the dispatch. "
    "Otherwise it passes; cancelled and timed-out jobs and backends with no response within "
    "{settle} do not block. A commit with no L4 backend passes."
)

MIRROR_ERRORS = Counter(
    "crcr_mirror_github_errors",
    "Failed GitHub calls of the mirror (hud.checks) by kind (check_run, gate, oncall_comment, "
    "rerun) and outcome (retry, given_up), counted in the process that made the call.",
    ["kind", "outcome"],
)


class SyncResult(enum.StrEnum):
    """What one sync of a mirrored row did."""

    SENT = "sent"  # GitHub now shows the desired state (created, updated or adopted)
    UNCHANGED = "unchanged"  # GitHub already showed it: no request made
    NOT_WANTED = "not_wanted"  # nothing to mirror (level, label, unverified, disabled)
    BUSY = "busy"  # another worker holds the row; it will take one more pass
    RETRY = "retry"  # a retryable failure; the lease holds the row until `retry_in`
    FAILED = "failed"  # permanently (validation, configuration, attempts exhausted)


@dataclasses.dataclass(frozen=True)
class SyncOutcome:
    """The result of a sync, when to retry it (seconds) and why, for logs and tasks."""

    result: SyncResult
    retry_in: float | None = None
    detail: str = ""


def combine(outcomes: Iterable[SyncOutcome]) -> SyncOutcome:
    """One outcome for several syncs: a retry wins (soonest), then a failure, then the first."""
    outcomes = list(outcomes)
    retries = [o for o in outcomes if o.result == SyncResult.RETRY]
    if retries:
        return min(retries, key=lambda o: o.retry_in or 0.0)
    failed = [o for o in outcomes if o.result == SyncResult.FAILED]
    if failed:
        return failed[0]
    return outcomes[0] if outcomes else SyncOutcome(SyncResult.NOT_WANTED)


# --- settings and small helpers -------------------------------------------------------------


def _max_attempts() -> int:
    return int(getattr(settings, "CRCR_MIRROR_MAX_ATTEMPTS", 10))


def upstream_repo() -> str:
    """The repository check runs and comments go to (CRCR_UPSTREAM_REPO)."""
    return settings.CRCR_UPSTREAM_REPO


def _iso(moment: dt.datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _error_text(error: Exception) -> str:
    return str(error)[:ERROR_CHARS]


def neutralise(text: Any, limit: int = TEXT_CHARS) -> str:
    """Copied text made inert for GitHub markdown: no mentions, references, HTML or links.

    One line; HTML escaped; markdown punctuation backslash-escaped (no links, images, code or
    emphasis); a zero-width joiner after `@` and `#` (no mentions, no issue references) and
    inside `scheme://` and `www.` (no autolinks).
    """
    flat = " ".join(str(text if text is not None else "").split())
    flat = "".join(ch for ch in flat if ch.isprintable())
    if len(flat) > limit:
        flat = flat[: max(limit - 1, 0)] + "…"
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    flat = _MARKDOWN_RE.sub(r"\\\1", flat)
    flat = flat.replace("@", "@" + ZWJ).replace("#", "#" + ZWJ)
    flat = _SCHEME_RE.sub(lambda m: m.group(1) + ZWJ + ":", flat)
    return _WWW_RE.sub(lambda m: m.group(0)[:3] + ZWJ + ".", flat)


def _safe_run_url(downstream: Downstream, url: str) -> str | None:
    """The downstream run URL, only when it is the verified repository's own Actions run."""
    return url if url and workflow_url_pattern(downstream.full_name).match(url) else None


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
    """The latest attempt of each logical job (hud.stats ordering: run_id, run_attempt, id)."""
    latest: dict[tuple, Job] = {}
    for job in jobs:
        key = (job.downstream_id, job.event_type, job.head_sha, job.workflow_name, job.job_name)
        current = latest.get(key)
        if current is None or (job.run_id, job.run_attempt, job.id) > (
            current.run_id,
            current.run_attempt,
            current.id,
        ):
            latest[key] = job
    return sorted(latest.values(), key=lambda j: (j.downstream_id, j.workflow_name, j.job_name))


# --- the claim (a lease taken with a conditional UPDATE, as in hud.relay) -------------------


def _claim(model: type, row_id: int, now: dt.datetime) -> bool:
    return claims.claim(model.objects.all(), "claimed_at", row_id, now, resync=False)


def _write(model: type, row_id: int, claimed_at: dt.datetime, **fields: Any) -> bool:
    """Write a sync's result, only while our claim still holds."""
    return bool(model.objects.filter(id=row_id, claimed_at=claimed_at).update(**fields))


def _run_claimed(
    model: type, row_id: int, now: dt.datetime, step: Callable[[dt.datetime], SyncOutcome]
) -> SyncOutcome:
    """Claim the row, run `step` until nobody asked for a resync meanwhile, release it."""
    if not _claim(model, row_id, now):
        # The holder sees the flag when it releases and takes one more pass with fresh data.
        model.objects.filter(id=row_id).update(resync=True)
        return SyncOutcome(SyncResult.BUSY, detail="another worker holds this row")
    outcome = SyncOutcome(SyncResult.UNCHANGED)
    for _ in range(MAX_PASSES):
        outcome = step(now)
        if outcome.result == SyncResult.RETRY:
            return outcome  # keep the lease: nobody retries before it runs out
        released = model.objects.filter(id=row_id, claimed_at=now, resync=False).update(
            claimed_at=None
        )
        if released:
            return outcome
        model.objects.filter(id=row_id, claimed_at=now).update(resync=False)
    # Still asked for more: leave `resync` for the reconciler rather than loop here.
    model.objects.filter(id=row_id, claimed_at=now).update(claimed_at=None, resync=True)
    return outcome


# hud.ops.metrics' `kind` label of each mirrored model.
_METRIC_KINDS = {
    "CheckRunMirror": "check_run",
    "GateCheck": "gate",
    "OncallComment": "oncall_comment",
}


def _failed_attempt(
    model: type,
    row: Any,
    claimed_at: dt.datetime,
    error: Exception,
    retryable: bool,
    retry_after: float | None,
) -> SyncOutcome:
    attempts = row.attempts + 1
    given_up = not retryable
    if retryable:
        # GitHub being down or rate-limiting us (5xx, 429, secondary limits, network) is never
        # a reason to give up: the row keeps its place in the reconciler, backing off at the
        # longest step, until GitHub answers. Only a refusal (4xx) gives up.
        attempts = min(attempts, _max_attempts() - 1)
    kind = _METRIC_KINDS.get(model.__name__, model.__name__)
    MIRROR_ERRORS.labels(kind, "given_up" if given_up else "retry").inc()
    if not given_up:
        _write(model, row.id, claimed_at, attempts=attempts, last_error=_error_text(error))
        logger.warning(
            "mirror attempt failed",
            extra={"model": model.__name__, "row": row.id, "error": _error_text(error)},
        )
        return SyncOutcome(
            SyncResult.RETRY, github.retry_delay(attempts, retry_after), _error_text(error)
        )
    # Given up (or refused outright): the reconciler leaves it until the desired state changes.
    _write(model, row.id, claimed_at, attempts=_max_attempts(), last_error=_error_text(error))
    logger.error(
        "mirror failed",
        extra={"model": model.__name__, "row": row.id, "error": _error_text(error)},
    )
    return SyncOutcome(SyncResult.FAILED, detail=_error_text(error))


# --- sending a check run (shared by jobs and gates) ------------------------------------------


def _shows(run: dict[str, Any], fields: dict[str, Any]) -> bool:
    """Whether a check run on GitHub already shows `fields` (status, conclusion, output)."""
    output = run.get("output") or {}
    wanted = fields.get("output") or {}
    return (
        run.get("status") == fields.get("status")
        and (run.get("conclusion") or None) == (fields.get("conclusion") or None)
        and output.get("title") == wanted.get("title")
        and output.get("summary") == wanted.get("summary")
    )


def _find_existing(
    client: github.GitHubApp, model: type, row: Any, fields: dict[str, Any]
) -> dict[str, Any] | None:
    """A check run an earlier, possibly timed-out create left on GitHub, owned by no other row."""
    runs = client.list_check_runs_for_ref(
        upstream_repo(), fields["head_sha"], check_name=fields["name"]
    )
    candidates = [
        run
        for run in runs
        if run.get("name") == fields["name"] and run.get("external_id") == fields["external_id"]
    ]
    if not candidates:
        return None
    owned = set(
        model.objects.filter(check_run_id__in=[run["id"] for run in candidates])
        .exclude(id=row.id)
        .values_list("check_run_id", flat=True)
    )
    free = [run for run in candidates if run["id"] not in owned]
    return max(free, key=lambda run: run["id"]) if free else None


@contextlib.contextmanager
def _single_attempt(client: github.GitHubApp) -> Iterator[None]:
    """No in-client retry for a create: a retried POST could make a second run or comment.

    The caller's lease and the lookup-before-create retry it safely instead.
    """
    attempts = client.max_attempts
    client.max_attempts = 1
    try:
        yield
    finally:
        client.max_attempts = attempts


def _sent_fields(fields: dict[str, Any], desired: str, now: dt.datetime) -> dict[str, Any]:
    return {
        "sent_hash": desired,
        "last_sent_state": {
            "status": fields.get("status"),
            "conclusion": fields.get("conclusion"),
            "title": (fields.get("output") or {}).get("title"),
        },
        "sent_at": now,
        "attempts": 0,
        "last_error": "",
    }


def _send_check_run(
    model: type, row: Any, fields: dict[str, Any], desired: str, now: dt.datetime
) -> SyncOutcome:
    """Make GitHub show `fields` on the row's check run: adopt, create once, or update."""
    repo = upstream_repo()
    try:
        with github.upstream_client() as client:
            run_id = row.check_run_id
            if run_id is None and row.create_attempted_at is not None:
                existing = _find_existing(client, model, row, fields)
                if existing is not None:
                    run_id = int(existing["id"])
                    _write(
                        model,
                        row.id,
                        now,
                        check_run_id=run_id,
                        html_url=str(existing.get("html_url") or "")[:500],
                    )
                    if _shows(existing, fields):
                        _write(model, row.id, now, **_sent_fields(fields, desired, now))
                        return SyncOutcome(SyncResult.SENT, detail="adopted")
            if run_id is None:
                _write(model, row.id, now, create_attempted_at=now)
                with _single_attempt(client):
                    run = client.create_check_run(repo, **fields)
                _write(
                    model,
                    row.id,
                    now,
                    check_run_id=int(run["id"]),
                    html_url=str(run.get("html_url") or "")[:500],
                    writes=F("writes") + 1,
                    **_sent_fields(fields, desired, now),
                )
                return SyncOutcome(SyncResult.SENT, detail="created")
            update = {key: value for key, value in fields.items() if key != "head_sha"}
            client.update_check_run(repo, run_id, **update)
            _write(
                model,
                row.id,
                now,
                writes=F("writes") + 1,
                **_sent_fields(fields, desired, now),
            )
            return SyncOutcome(SyncResult.SENT, detail="updated")
    except github.GitHubError as error:
        return _failed_attempt(model, row, now, error, error.retryable, error.retry_after)
    except (github.GitHubConfigError, ValueError, KeyError, TypeError) as error:
        return _failed_attempt(model, row, now, error, False, None)


# --- per-job check runs ----------------------------------------------------------------------


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
    desired = _hash(fields)
    changes: dict[str, Any] = {
        "wanted": True,
        "skip_reason": "",
        "name": fields["name"][:600],
        "head_sha": job.head_sha,
        "desired_hash": desired,
        "source_updated_at": job.updated_at,
    }
    if desired != mirror.desired_hash:
        changes["attempts"] = 0  # a new state deserves fresh attempts
        mirror.attempts = 0
    _write(CheckRunMirror, mirror.id, now, **changes)
    if mirror.check_run_id is not None and mirror.sent_hash == desired:
        return SyncOutcome(SyncResult.UNCHANGED)
    return _send_check_run(CheckRunMirror, mirror, fields, desired, now)


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


def mirror_job(job_id: int) -> SyncOutcome:
    """Everything one job report changes on GitHub: its check run, the gate, the on-call ping."""
    job = Job.objects.select_related("downstream").filter(id=job_id).first()
    if job is None or not mirror_enabled():
        return SyncOutcome(SyncResult.NOT_WANTED, detail="nothing to mirror")
    outcomes = [sync_job(job_id)]
    if job.head_sha:
        outcomes.append(sync_gate(job.head_sha))
    if oncall_comment_needed(job):
        outcomes.append(sync_oncall_comment(job.pr_number, job.downstream_id))
    return combine(outcomes)


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


# --- the merge gate --------------------------------------------------------------------------


def _settle() -> dt.timedelta:
    return selectors.no_response_after()


def _hours(delta_seconds: float) -> str:
    hours = delta_seconds / 3600
    return f"{hours:g} h" if hours >= 1 else f"{delta_seconds / 60:g} min"


def gate_rule() -> str:
    """The gate's rule in words, with this server's settle time and sweeper timeout."""
    return GATE_RULE.format(
        settle=_hours(_settle().total_seconds()),
        zombie=_hours(float(settings.CRCR_ZOMBIE_TIMEOUT_SECONDS)),
    )


def _expected_names(
    downstream_id: int, event_types: set[str], head_sha: str, now: dt.datetime
) -> set[tuple[str, str]]:
    """The (workflow, job) names a backend ran on its recent commits of these event types."""
    days = int(getattr(settings, "CRCR_GATE_HISTORY_DAYS", 14))
    runs = int(getattr(settings, "CRCR_GATE_HISTORY_RUNS", 5))
    recent = (
        Job.objects.filter(
            downstream_id=downstream_id,
            event_type__in=event_types,
            verified=True,
            placed_at__gte=now - dt.timedelta(days=days),
            placed_at__lte=now,
        )
        .exclude(head_sha=head_sha)
        .order_by("-placed_at", "-id")
        .values_list("delivery_id", flat=True)[:2000]
    )
    deliveries: list[str] = []
    for delivery_id in recent:
        if delivery_id not in deliveries:
            deliveries.append(delivery_id)
            if len(deliveries) >= runs:
                break
    return set(
        Job.objects.filter(downstream_id=downstream_id, delivery_id__in=deliveries).values_list(
            "workflow_name", "job_name"
        )
    )


def _item(
    downstream: Downstream,
    state: str,
    reason: str,
    *,
    job: Job | None = None,
    names: tuple[str, str] | None = None,
    settles_at: dt.datetime | None = None,
) -> dict[str, Any]:
    workflow_name, job_name = (job.workflow_name, job.job_name) if job else (names or ("", ""))
    return {
        "downstream": downstream.full_name,
        "workflow_name": workflow_name,
        "job_name": job_name,
        "state": state,
        "conclusion": (job.conclusion or None) if job else None,
        "job_id": job.id if job else None,
        "run_attempt": job.run_attempt if job else None,
        "url": _safe_run_url(downstream, job.workflow_url) if job else None,
        "reason": reason,
        "settles_at": _iso(settles_at),
    }


def gate_decision(head_sha: str, now: dt.datetime | None = None) -> dict[str, Any]:
    """The L4 merge gate of one head SHA (CRCR.md, "L4 blocking"), as a plain dict.

    `state` is failure, pending or success; `blocking`, `pending`, `non_blocking` and
    `passed` list jobs (or whole backends, with empty job names) and why; `rule` says it in
    words. The `crcr/gate` check run and `GET /api/v1/gate/<sha>` both come from here.
    """
    now = now or clock.now()
    settle = _settle()
    dispatches = list(
        Dispatch.objects.filter(delivery__head_sha=head_sha)
        .select_related("delivery", "downstream")
        .order_by("created_at", "id")
    )
    per_backend: dict[int, list[Dispatch]] = defaultdict(list)
    for dispatch in dispatches:
        per_backend[dispatch.downstream_id].append(dispatch)
    backends = {d.downstream_id: d.downstream for d in dispatches}
    levels = effective_levels(backends.values(), now) if backends else {}
    l4 = sorted(
        (backends[i] for i, level in levels.items() if level >= Level.L4),
        key=lambda d: d.full_name.lower(),
    )
    blocking: list[dict] = []
    pending: list[dict] = []
    non_blocking: list[dict] = []
    passed: list[dict] = []
    silent: list[str] = []
    recheck: list[dt.datetime] = []
    for downstream in l4:
        rows = per_backend[downstream.id]
        guids = {row.delivery.delivery_id for row in rows}
        event_types = {row.delivery.event_type for row in rows}
        sent = [row.dispatched_at for row in rows if row.outcome == Dispatch.Outcome.SENT]
        waiting = [row.created_at for row in rows if row.outcome == Dispatch.Outcome.PENDING]
        jobs = list(
            Job.objects.filter(
                downstream=downstream, head_sha=head_sha, delivery_id__in=guids, verified=True
            )
        )
        latest = {(j.workflow_name, j.job_name): j for j in _latest_attempts(jobs)}
        if not sent and not jobs:
            if waiting:
                deadline = min(waiting) + settle
                if now < deadline:
                    pending.append(
                        _item(
                            downstream, "not_started", "dispatch not sent yet", settles_at=deadline
                        )
                    )
                    recheck.append(deadline)
                else:
                    non_blocking.append(
                        _item(downstream, "undelivered", "the dispatch was not delivered")
                    )
            else:
                outcomes = sorted({row.outcome for row in rows})
                non_blocking.append(
                    _item(downstream, "undelivered", f"dispatch {', '.join(outcomes)}")
                )
            continue
        start = (
            min(t for t in sent if t is not None) if any(sent) else min(r.created_at for r in rows)
        )
        deadline = start + settle
        names = set(latest) | _expected_names(downstream.id, event_types, head_sha, now)
        if not names:
            # No history and no callback yet: the backend as a whole is awaited, then silent.
            if now < deadline:
                pending.append(
                    _item(downstream, "not_started", "no callback yet", settles_at=deadline)
                )
                recheck.append(deadline)
            else:
                silent.append(downstream.full_name)
                non_blocking.append(
                    _item(
                        downstream,
                        "no_response",
                        f"no response within {_hours(settle.total_seconds())}",
                    )
                )
            continue
        missing_after_deadline = []
        for name in sorted(names):
            job = latest.get(name)
            if job is None:
                if now < deadline:
                    pending.append(
                        _item(
                            downstream,
                            "not_started",
                            "expected from recent history, not started",
                            names=name,
                            settles_at=deadline,
                        )
                    )
                    recheck.append(deadline)
                else:
                    missing_after_deadline.append(name)
            elif job.status != Job.Status.COMPLETED:
                pending.append(_item(downstream, "running", "running", job=job))
            elif job.conclusion == Job.Conclusion.FAILURE:
                blocking.append(
                    _item(downstream, "failure", "failed on its latest attempt", job=job)
                )
            elif job.conclusion in NON_BLOCKING_CONCLUSIONS:
                reason = (
                    "closed by the sweeper as timed out"
                    if job.closed_by_sweeper
                    else f"{job.conclusion} (does not block)"
                )
                non_blocking.append(_item(downstream, job.conclusion, reason, job=job))
            else:
                passed.append(_item(downstream, job.conclusion or "success", "passed", job=job))
        if missing_after_deadline and not jobs:
            silent.append(downstream.full_name)
            non_blocking.append(
                _item(
                    downstream,
                    "no_response",
                    f"no response within {_hours(settle.total_seconds())}",
                )
            )
        else:
            for name in missing_after_deadline:
                non_blocking.append(
                    _item(
                        downstream,
                        "no_response",
                        f"expected from recent history; not started within "
                        f"{_hours(settle.total_seconds())}",
                        names=name,
                    )
                )
    if blocking:
        state, status, conclusion = "failure", "completed", "failure"
        title = f"{len(blocking)} L4 job(s) failed"
    elif pending:
        state, status, conclusion = "pending", "in_progress", None
        title = f"Waiting for {len(pending)} L4 job(s)"
    else:
        state, status, conclusion = "success", "completed", "success"
        if not l4:
            title = "No L4 backend for this commit"
        elif non_blocking:
            title = f"No L4 failure ({len(non_blocking)} not blocking)"
        else:
            title = f"All {len(passed)} L4 job(s) passed"
    return {
        "head_sha": head_sha,
        "check_name": GATE_NAME,
        "state": state,
        "status": status,
        "conclusion": conclusion,
        "title": title,
        "rule": gate_rule(),
        "settle_seconds": int(settle.total_seconds()),
        "dispatched": bool(dispatches),
        "l4_backends": [d.full_name for d in l4],
        "blocking": blocking,
        "pending": pending,
        "non_blocking": non_blocking,
        "passed": passed,
        "silent_backends": silent,
        "pr_numbers": sorted({d.delivery.pr_number for d in dispatches if d.delivery.pr_number}),
        "recheck_at": _iso(min(recheck)) if recheck else None,
        "evaluated_at": _iso(now),
    }


def _gate_line(item: dict[str, Any], reason: str | None = None) -> str:
    who = neutralise(item["downstream"])
    if item["job_name"]:
        who += f" · {neutralise(item['workflow_name'])} / {neutralise(item['job_name'])}"
    return f"- {who}: {neutralise(reason or item['reason'])}"


def gate_summary(decision: dict[str, Any]) -> str:
    """The gate check run's markdown summary (deterministic for one decision)."""
    if not decision["l4_backends"]:
        lines = ["No L4 backend was dispatched for this commit, so nothing here can block it."]
    else:
        lines = [f"**L4 backends:** {', '.join(neutralise(n) for n in decision['l4_backends'])}"]
    sections = (
        ("Blocking", decision["blocking"]),
        ("Waiting for", decision["pending"]),
        ("Not blocking", decision["non_blocking"]),
    )
    for heading, items in sections:
        if items:
            # Waiting items all read alike, so a job starting does not cost a gate update.
            waiting = heading == "Waiting for"
            text = "\n".join(
                _gate_line(item, "waiting for a result" if waiting else None) for item in items
            )
            lines.append(f"**{heading}:**\n{text}")
    if decision["pending"]:
        deadlines = sorted({i["settles_at"] for i in decision["pending"] if i["settles_at"]})
        if deadlines:
            lines.append(
                f"Jobs that have not started by {deadlines[-1].replace('T', ' ')} count as no "
                "response and stop blocking."
            )
    if decision["passed"]:
        lines.append(f"**Passed:** {len(decision['passed'])} L4 job(s).")
    lines.append(f"**Rule.** {decision['rule']}")
    return "\n\n".join(lines)


def gate_fields(decision: dict[str, Any]) -> dict[str, Any]:
    """The `crcr/gate` check-run body for a decision; never `neutral` for a bad outcome."""
    fields: dict[str, Any] = {
        "name": GATE_NAME,
        "head_sha": decision["head_sha"],
        "external_id": f"gate:{decision['head_sha']}",
        "status": decision["status"],
        "output": {"title": decision["title"], "summary": gate_summary(decision)},
    }
    if decision["conclusion"]:
        fields["conclusion"] = decision["conclusion"]
    public = getattr(settings, "CRCR_PUBLIC_URL", "")
    if public:
        fields["details_url"] = f"{public}/crcr/commit/{decision['head_sha']}"
    return fields


def _gate_step(gate_id: int, now: dt.datetime) -> SyncOutcome:
    gate = GateCheck.objects.get(id=gate_id)
    decision = gate_decision(gate.head_sha, now)
    notifications.notify_gate_decision(decision)  # repeated L4 failures: once per streak
    fields = gate_fields(decision)
    desired = _hash(fields)
    recheck = decision["recheck_at"]
    changes: dict[str, Any] = {
        "state": decision["state"],
        "evaluated_at": now,
        "recheck_at": dt.datetime.fromisoformat(recheck.replace("Z", "+00:00"))
        if recheck
        else None,
        "desired_hash": desired,
    }
    if desired != gate.desired_hash:
        changes["attempts"] = 0
        gate.attempts = 0
    _write(GateCheck, gate.id, now, **changes)
    if gate.check_run_id is not None and gate.sent_hash == desired:
        return SyncOutcome(SyncResult.UNCHANGED)
    return _send_check_run(GateCheck, gate, fields, desired, now)


def sync_gate(head_sha: str) -> SyncOutcome:
    """Post or update the `crcr/gate` check of a dispatched head SHA."""
    if not mirror_enabled() or not head_sha:
        return SyncOutcome(SyncResult.NOT_WANTED, detail="check runs are not configured")
    if not Dispatch.objects.filter(delivery__head_sha=head_sha).exists():
        return SyncOutcome(SyncResult.NOT_WANTED, detail="nothing was dispatched for this SHA")
    now = clock.now()
    gate, _ = GateCheck.objects.get_or_create(head_sha=head_sha, defaults={"created_at": now})
    return _run_claimed(GateCheck, gate.id, now, lambda at: _gate_step(gate.id, at))


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


# --- the PR page's read --------------------------------------------------------------------


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


def pr_mirror_state(
    pr_number: int, now: dt.datetime | None = None, *, latest_gate_only: bool = False
) -> dict[str, Any]:
    """What this PR shows on GitHub: the gate of each head SHA and each job's check run.

    Plain dicts, newest head SHA first; `gate` is the latest head SHA's gate (or None when
    nothing was dispatched for the PR). `latest_gate_only` evaluates just that gate (the PR
    page), so the page's queries do not grow with the PR's pushes.
    """
    now = now or clock.now()
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
    dispatched = set(
        Dispatch.objects.filter(delivery__head_sha__in=head_shas).values_list(
            "delivery__head_sha", flat=True
        )
    )
    gate_shas = [sha for sha in head_shas if sha in dispatched]
    if latest_gate_only:
        gate_shas = gate_shas[:1]
    gates = [gate_state(sha, now) for sha in gate_shas]
    jobs = (
        Job.objects.filter(pr_number=pr_number, event_type="pull_request")
        .select_related("downstream", "mirror")
        .order_by("-placed_at", "-id")
    )
    job_list = list(jobs)
    levels = effective_levels({j.downstream_id: j.downstream for j in job_list}.values(), now)
    labels = {label.lower() for label in _pr_labels(pr_number)}
    mirroring = mirror_enabled()
    check_runs = []
    for job in job_list:
        row = getattr(job, "mirror", None)
        reason = _not_mirrored_reason(job, levels[job.downstream_id], labels)
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
        check_runs.append(
            {
                "job_id": job.id,
                "name": check_run_name(job),
                "downstream": job.downstream.full_name,
                "level": levels[job.downstream_id],
                "head_sha": job.head_sha,
                "status": job.status,
                "conclusion": job.conclusion or None,
                "run_attempt": job.run_attempt,
                **info,
            }
        )
    comments = [
        {
            "downstream": row.downstream.full_name,
            "comment_id": row.comment_id,
            "html_url": row.html_url,
            "sent": row.comment_id is not None and row.last_body_hash == row.desired_hash,
            "sent_at": _iso(row.sent_at),
            "last_error": row.last_error,
        }
        for row in OncallComment.objects.filter(pr_number=pr_number).select_related("downstream")
    ]
    reruns = [
        {
            "downstream": row.downstream.full_name,
            "run_id": row.run_id,
            "kind": row.kind,
            "outcome": row.outcome,
            "requested_at": _iso(row.requested_at),
            "reason": row.reason,
        }
        for row in RerunRequest.objects.filter(head_sha__in=head_shas)
        .select_related("downstream")
        .order_by("-created_at")
    ]
    return {
        "pr_number": pr_number,
        "head_sha": head_shas[0] if head_shas else None,
        "gate": gates[0] if gates else None,
        "gates": gates,
        "check_runs": check_runs,
        "oncall_comments": comments,
        "reruns": reruns,
    }


# --- re-runs ---------------------------------------------------------------------------------


def _downstream_from_name(name: str) -> Downstream | None:
    if not name.startswith(CHECK_NAME_PREFIX):
        return None
    parts = name[len(CHECK_NAME_PREFIX) :].split("/")
    if len(parts) < 4:
        return None
    return levels.find_downstream(f"{parts[0]}/{parts[1]}")


def _run_of_check_run(check_run: dict[str, Any]) -> tuple[Downstream, int, str] | None:
    """(downstream, run id, head SHA) of one of our check runs, through its external_id."""
    match = _EXTERNAL_ID_RE.match(str(check_run.get("external_id") or ""))
    if match is None:
        return None
    run_id = int(match.group(1))
    mirror = (
        CheckRunMirror.objects.select_related("job__downstream")
        .filter(check_run_id=check_run.get("id"))
        .first()
    )
    downstream = (
        mirror.job.downstream if mirror else _downstream_from_name(str(check_run.get("name")))
    )
    if downstream is None:
        return None
    head_sha = str(check_run.get("head_sha") or "")
    job = (
        Job.objects.filter(downstream=downstream, run_id=run_id, verified=True)
        .filter(Q(head_sha=head_sha) if head_sha else Q())
        .first()
    )
    return (downstream, run_id, job.head_sha) if job else None


def request_reruns(delivery: Delivery, event: str, body: dict[str, Any]) -> str:
    """Record the re-runs a `rerequested` event asks for and enqueue them; a sentence."""

    now = clock.now()
    targets: list[tuple[Downstream, int, str, str]] = []
    if event == "check_run":
        check_run = body.get("check_run") if isinstance(body.get("check_run"), dict) else {}
        if check_run.get("name") == GATE_NAME:
            sha = str(check_run.get("head_sha") or "")
            taskqueue.enqueue("crcr.sync_gate", sha)
            return "crcr/gate re-requested: the gate is evaluated again"
        found = _run_of_check_run(check_run)
        if found is None:
            return "check_run rerequested: not a CRCR check run of a known downstream run"
        downstream, run_id, sha = found
        failed = Job.objects.filter(
            downstream=downstream,
            run_id=run_id,
            status=Job.Status.COMPLETED,
            conclusion__in=("failure", "cancelled", "timed_out"),
        ).exists()
        kind = RerunRequest.Kind.FAILED_JOBS if failed else RerunRequest.Kind.ALL
        targets.append((downstream, run_id, sha, kind))
    else:
        suite = body.get("check_suite") if isinstance(body.get("check_suite"), dict) else {}
        sha = str(suite.get("head_sha") or "")
        mirrored = (
            CheckRunMirror.objects.filter(head_sha=sha, check_run_id__isnull=False)
            .select_related("job__downstream")
            .order_by("id")
        )
        seen: set[tuple[int, int]] = set()
        for mirror in mirrored:
            key = (mirror.job.downstream_id, mirror.job.run_id)
            if sha and key not in seen:
                seen.add(key)
                targets.append(
                    (mirror.job.downstream, mirror.job.run_id, sha, RerunRequest.Kind.ALL)
                )
    created = 0
    refused = []
    for downstream, run_id, sha, kind in targets:
        level = _effective_level(downstream, now)
        if level < Level.L3:
            refused.append(f"{downstream.full_name} is L{level}")
            continue
        try:
            with transaction.atomic():
                row = RerunRequest.objects.create(
                    downstream=downstream,
                    run_id=run_id,
                    kind=kind,
                    delivery_id=delivery.delivery_id,
                    head_sha=sha,
                    created_at=now,
                )
        except IntegrityError:
            continue
        taskqueue.enqueue("crcr.send_rerun", row.id)
        created += 1
    detail = f"{event} rerequested: {created} downstream re-run(s) requested"
    if refused:
        detail += f"; not re-run below L3: {', '.join(refused)}"
    return detail


def send_rerun(rerun_id: int) -> SyncOutcome:
    """Ask GitHub to re-run one downstream run once; an already running run is not an error."""
    now = clock.now()
    claimed = (
        RerunRequest.objects.filter(id=rerun_id, outcome=RerunRequest.Outcome.PENDING)
        .filter(claims.unleased("claimed_at", now))
        .update(claimed_at=now, attempts=F("attempts") + 1)
    )
    if not claimed:
        return SyncOutcome(SyncResult.BUSY, detail="sent, given up, or claimed by another")
    row = RerunRequest.objects.select_related("downstream").get(id=rerun_id)
    repo = row.downstream.full_name
    try:
        with github.dispatch_client() as client:
            if row.kind == RerunRequest.Kind.FAILED_JOBS:
                result = client.rerun_failed_jobs(repo, row.run_id)
            else:
                result = client.rerun_run(repo, row.run_id)
    except github.GitHubError as error:
        retryable = error.retryable and row.attempts < _max_attempts()
        MIRROR_ERRORS.labels("rerun", "retry" if retryable else "given_up").inc()
        if retryable:
            RerunRequest.objects.filter(id=rerun_id, claimed_at=now).update(
                reason=_error_text(error)
            )
            return SyncOutcome(
                SyncResult.RETRY, github.retry_delay(row.attempts, error.retry_after)
            )
        RerunRequest.objects.filter(id=rerun_id, claimed_at=now).update(
            outcome=RerunRequest.Outcome.FAILED, reason=_error_text(error)
        )
        return SyncOutcome(SyncResult.FAILED, detail=_error_text(error))
    except (github.GitHubConfigError, ValueError) as error:
        MIRROR_ERRORS.labels("rerun", "given_up").inc()
        RerunRequest.objects.filter(id=rerun_id, claimed_at=now).update(
            outcome=RerunRequest.Outcome.FAILED, reason=_error_text(error)
        )
        return SyncOutcome(SyncResult.FAILED, detail=_error_text(error))
    if result == github.RerunOutcome.ALREADY_RUNNING:
        RerunRequest.objects.filter(id=rerun_id, claimed_at=now).update(
            outcome=RerunRequest.Outcome.ALREADY_RUNNING, reason="the run is already running"
        )
    else:
        # The next attempt's queue time is measured from this moment (hud.ingestion.ingest).
        RerunRequest.objects.filter(id=rerun_id, claimed_at=now).update(
            outcome=RerunRequest.Outcome.REQUESTED, requested_at=clock.now(), reason=""
        )
    logger.info("downstream re-run", extra={"rerun": rerun_id, "result": str(result)})
    return SyncOutcome(SyncResult.SENT, detail=str(result))


def on_stored_event(delivery: Delivery, event: str, body: dict[str, Any]) -> str:
    """Part 2's reaction to a stored (not dispatched) webhook; a sentence, or "" for none."""

    if not mirror_enabled():
        return ""
    action = str(body.get("action") or "")
    if event == "pull_request" and action == "labeled":
        label = body.get("label") if isinstance(body.get("label"), dict) else {}
        name = str(label.get("name") or "")
        if name.lower().startswith(LABEL_PREFIX) and delivery.head_sha:
            taskqueue.enqueue("crcr.mirror_backfill", delivery.head_sha)
            return f"label {name} recorded; check runs back-filled for {delivery.head_sha[:12]}"
        return ""
    if event in ("check_run", "check_suite") and action == "rerequested":
        return request_reruns(delivery, event, body)
    return ""


# --- on-call comments ------------------------------------------------------------------------


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
    changes: dict[str, Any] = {"desired_hash": desired}
    if desired != row.desired_hash:
        changes["attempts"] = 0
        row.attempts = 0
    _write(OncallComment, row.id, now, **changes)
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


# --- the reconciler ---------------------------------------------------------------------------


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
