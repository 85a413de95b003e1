"""Callback → Job: the entry points and the state machine, idempotency.

One service for the three ways results arrive: a downstream's OIDC callback, the relay's
forward (`POST /api/crcr/results`) and `import_results`. The answer order and the state
outcomes are those of CRCR.md ("Callback answers", "State outcomes"). Admission (allowlist,
level, rate limit, token replay) is `hud.ingestion.admission`, the sweeper
`hud.ingestion.sweeper`; their public names are re-exported here, where callers import them.
"""

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from hud import github, levels
from hud.core import allowlist, clock, inputs, taskqueue
from hud.core.payload import CallbackData, PayloadError, decode_json, parse_callback
from hud.ingestion import derived
from hud.ingestion.admission import CallbackToken, Rejected, admit, spend_token
from hud.ingestion.admission import prune_used_tokens as prune_used_tokens
from hud.ingestion.admission import take_rate_token as take_rate_token
from hud.ingestion.sweeper import sweep_zombies as sweep_zombies
from hud.models import Downstream, Job, Level, RerunRequest, sql

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """What happened to a callback: `created`, `updated`, `duplicate`, `stale` or `ignored`."""

    status: str
    job_id: int | None = None


@dataclass(frozen=True)
class TrustedTiming:
    """Times a trusted source (relay forward, history import) vouches for."""

    queue_seconds: float | None
    execution_seconds: float | None


# --- Entry points -------------------------------------------------------------------------


def receive_callback(repo: str, raw_body: bytes, token: CallbackToken) -> Outcome:
    """A downstream's callback whose token named `repo`: steps 2 (replay) to 7 of the order.

    The token is spent in the transaction that stores its result, so a crash or a 503 leaves
    it usable for the sender's retry. A definitive refusal (4xx other than 429) spends it too;
    a 429 leaves it usable, since the sender is told to come back with it.
    """
    try:
        with transaction.atomic():
            if not spend_token(token):
                raise Rejected(401, "invalid_token", "token already used")
            downstream = admit(repo)
            if downstream is None:
                return Outcome("ignored")
            try:
                # The token's repository, not the backend's name: they differ after a rename.
                data = parse_callback(decode_json(raw_body), repo)
            except PayloadError as error:
                raise Rejected.from_payload_error(error) from error
            return _settle(downstream, data, source=Job.Source.CALLBACK, timing=None)
    except Rejected as refusal:
        if refusal.http_status not in (401, 429):
            # Rolled back with the refusal; a concurrent copy may have spent it already.
            spend_token(token)
        raise


def parse_forward(body: Any) -> tuple[str, int, TrustedTiming, Any]:
    """Split a relay forward into (verified repo, level, trusted timing, callback body)."""
    if not isinstance(body, dict):
        raise PayloadError("body must be a JSON object", "body")
    trusted = body.get("trusted")
    untrusted = body.get("untrusted")
    if not isinstance(trusted, dict):
        raise PayloadError("trusted must be an object", "trusted")
    if not isinstance(untrusted, dict) or "callback_payload" not in untrusted:
        raise PayloadError(
            "untrusted.callback_payload is required", "untrusted.callback_payload", "missing_field"
        )
    repo = trusted.get("verified_repo")
    if not isinstance(repo, str) or not allowlist.is_repository_name(repo):
        raise PayloadError(
            "trusted.verified_repo must be a GitHub owner/repo name", "trusted.verified_repo"
        )
    try:
        level = Level.parse(str(trusted.get("downstream_repo_level", "")))
    except ValueError as exc:
        raise PayloadError(str(exc), "trusted.downstream_repo_level") from exc
    metrics = trusted.get("ci_metrics") or {}
    if not isinstance(metrics, dict):
        raise PayloadError("trusted.ci_metrics must be an object", "trusted.ci_metrics")
    timing = []
    for key in ("queue_time", "execution_time"):
        timing.append(inputs.seconds(metrics.get(key), f"trusted.ci_metrics.{key}"))
    return repo, level, TrustedTiming(*timing), untrusted["callback_payload"]


def receive_forward(body: Any, *, source: str = Job.Source.FORWARD) -> Outcome:
    """A relay forward (or an imported one): identity and level from `trusted`, reported times."""
    try:
        repo, level, timing, callback_body = parse_forward(body)
        if level < Level.L2:
            return Outcome("ignored")
        data = parse_callback(callback_body, repo, check_url=False)
    except PayloadError as error:
        raise Rejected.from_payload_error(error) from error
    # The body's times are untrusted: a live forward is placed (and its level learnt) at
    # receipt; only an operator's import_results places history where it reportedly ran.
    placed = clock.now()
    if source == Job.Source.IMPORT:
        placed = _imported_at(data, placed)
    # One transaction: a refused or failed result leaves no learnt level history behind.
    with transaction.atomic():
        downstream = levels.learn_level_from_forward(repo, level, placed)
        if downstream.delisted:
            raise Rejected(403, "not_allowlisted", f"{repo} is delisted on this server")
        return store(downstream, data, source=source, timing=timing)


# --- The state machine --------------------------------------------------------------------


@dataclass(frozen=True)
class KnownDelivery:
    """What a callback needs of its upstream delivery, and of its dispatch to this backend."""

    id: int
    delivery_id: str
    event_type: str
    pr_number: int
    head_sha: str
    ref: str
    dispatch_id: int | None
    dispatched_at: dt.datetime | None


def store(
    downstream: Downstream, data: CallbackData, *, source: str, timing: TrustedTiming | None = None
) -> Outcome:
    """Step 7: upsert the job by its row key, moving its state only forward."""
    with transaction.atomic():
        return _settle(downstream, data, source=source, timing=timing)


def _settle(
    downstream: Downstream, data: CallbackData, *, source: str, timing: TrustedTiming | None
) -> Outcome:
    """`store` inside a transaction the caller holds (no savepoint on the callback path)."""
    now = clock.now()
    delivery = _find_delivery(downstream, data.delivery_id)
    if delivery is not None:
        _check_against_delivery(data, delivery)
    job = _lock_job(downstream, data)
    if job is None:
        job = _new_job(downstream, data, delivery, source, timing, now)
        if _insert_job(job):
            if data.status == Job.Status.COMPLETED:
                _store_failed_tests(job, data)
            derived.refresh_job(job)
            _enqueue_mirror(downstream, job)
            return Outcome("created", job.id)
        # A concurrent identical callback won the insert; settle against its row.
        job = _lock_job(downstream, data)
    outcome = _transition(job, data, timing, now)
    if outcome.status == "updated":
        derived.refresh_job(job)
        _enqueue_mirror(downstream, job)
    return outcome


def _find_delivery(downstream: Downstream, delivery_id: str) -> KnownDelivery | None:
    with connection.cursor() as cursor:
        cursor.execute(sql.FIND_DELIVERY, (downstream.id, delivery_id))
        row = cursor.fetchone()
    if row is None:
        return None
    return KnownDelivery(*row[:7], dispatched_at=sql.aware(row[7]))


def _lock_job(downstream: Downstream, data: CallbackData) -> Job | None:
    key = (downstream.id, data.delivery_id, data.workflow_name, data.job_name, data.check_run_id)
    with connection.cursor() as cursor:
        cursor.execute(sql.lock_job(connection.features.has_select_for_update), key)
        row = cursor.fetchone()
    return None if row is None else sql.instance(Job, ("id", *sql.JOB_COLUMNS), row)


def _insert_job(job: Job) -> bool:
    """Insert a new job; False when a concurrent identical callback inserted it first."""
    with connection.cursor() as cursor:
        cursor.execute(sql.INSERT_JOB, sql.values(job, sql.JOB_COLUMNS))
        row = cursor.fetchone()
    if row is None:
        return False
    job.id = row[0]
    job._state.adding = False
    job._state.db = connection.alias
    return True


def _enqueue_mirror(downstream: Downstream, job: Job) -> None:
    """On commit, mirror an L3/L4 verified result onto the upstream PR (hud.checks decides)."""
    if job.verified and downstream.level >= Level.L3 and job.source != Job.Source.IMPORT:
        if not github.mirror_enabled():
            return  # the task would do nothing; not queueing it keeps bulk loads (the demo) fast

        taskqueue.enqueue("crcr.mirror_job", job.id)


def _check_against_delivery(data: CallbackData, delivery: KnownDelivery) -> None:
    """A known delivery decides head SHA and PR number; a body contradicting it is refused."""
    if data.head_sha_field and delivery.head_sha and data.head_sha != delivery.head_sha:
        raise Rejected(
            400,
            "contradicts_delivery",
            f"{data.head_sha_field} is {data.head_sha[:12]}, but delivery "
            f"{delivery.delivery_id} is for {delivery.head_sha[:12]}",
            data.head_sha_field,
        )
    if data.pr_number and data.pr_number != delivery.pr_number:
        raise Rejected(
            400,
            "contradicts_delivery",
            f"payload.pull_request.number is {data.pr_number}, but delivery "
            f"{delivery.delivery_id} is for PR {delivery.pr_number}",
            "payload.pull_request.number",
        )


def _new_job(
    downstream: Downstream,
    data: CallbackData,
    delivery: KnownDelivery | None,
    source: str,
    timing: TrustedTiming | None,
    now: dt.datetime,
) -> Job:
    """The job a first callback creates (not saved yet)."""
    job = Job(
        downstream=downstream,
        delivery_id=data.delivery_id,
        workflow_name=data.workflow_name,
        job_name=data.job_name,
        check_run_id=data.check_run_id,
        event_type=delivery.event_type if delivery else data.event_type,
        pr_number=delivery.pr_number if delivery else data.pr_number,
        head_sha=(delivery.head_sha or data.head_sha) if delivery else data.head_sha,
        ref=delivery.ref if delivery else data.ref,
        dispatch_id=delivery.dispatch_id if delivery else None,
        verified=delivery is not None,
        source=source,
        run_id=data.run_id,
        run_attempt=data.run_attempt,
        workflow_url=data.workflow_url,
        status=data.status,
        reported_started_at=data.started_at,
        updated_at=now,
        placed_at=now,
    )
    if data.status == Job.Status.IN_PROGRESS:
        job.in_progress_received_at = now
        dispatched_at = delivery.dispatched_at if delivery else None
        if timing is None and dispatched_at and data.run_attempt == 1:
            job.queue_seconds = max((now - dispatched_at).total_seconds(), 0.0)
            job.timing_source = Job.TimingSource.SERVER
        elif timing is None and data.run_attempt > 1:
            requested_at = _rerun_requested_at(downstream, data, now)
            if requested_at is not None:
                job.queue_seconds = max((now - requested_at).total_seconds(), 0.0)
                job.timing_source = Job.TimingSource.SERVER
    else:
        _apply_completion(job, data, now)
    if timing is not None:
        _apply_trusted_timing(job, data, timing, now)
    return job


def _rerun_requested_at(
    downstream: Downstream, data: CallbackData, now: dt.datetime
) -> dt.datetime | None:
    """When we asked GitHub to re-run this run, if that request is what started this attempt.

    Not when an earlier attempt started after our request (the request was for that one).
    """
    request = (
        RerunRequest.objects.filter(
            downstream=downstream,
            run_id=data.run_id,
            outcome=RerunRequest.Outcome.REQUESTED,
            requested_at__lte=now,
        )
        .order_by("-requested_at")
        .first()
    )
    if request is None:
        return None
    later_attempt = Job.objects.filter(
        downstream=downstream,
        run_id=data.run_id,
        run_attempt__lt=data.run_attempt,
        in_progress_received_at__gt=request.requested_at,
    ).exists()
    return None if later_attempt else request.requested_at


def _transition(
    job: Job, data: CallbackData, timing: TrustedTiming | None, now: dt.datetime
) -> Outcome:
    if data.status == Job.Status.IN_PROGRESS:
        if job.status == Job.Status.IN_PROGRESS:
            return Outcome("duplicate", job.id)
        # Completed already: an in_progress arriving late only fills what is still empty.
        if job.reported_started_at is None and data.started_at is not None:
            job.reported_started_at = data.started_at
            job.updated_at = now
            job.save(update_fields=["reported_started_at", "updated_at"])
        return Outcome("stale", job.id)
    if job.status == Job.Status.COMPLETED:
        if job.closed_by_sweeper:
            job.closed_by_sweeper = False
        elif job.conclusion == data.conclusion:
            return Outcome("duplicate", job.id)
        else:
            logger.warning(
                "conflicting completed callback",
                extra={
                    "job": job.id,
                    "stored_conclusion": job.conclusion,
                    "arriving_conclusion": data.conclusion,
                },
            )
            raise Rejected(
                409,
                "conflict",
                f"job {job.id} already completed as {job.conclusion}; a different "
                f"conclusion ({data.conclusion}) for the same attempt is refused",
                "workflow.conclusion",
            )
    _apply_completion(job, data, now)
    if timing is not None:
        _apply_trusted_timing(job, data, timing, now)
    elif job.in_progress_received_at is not None:
        job.execution_seconds = max((now - job.in_progress_received_at).total_seconds(), 0.0)
        job.timing_source = Job.TimingSource.SERVER
    job.updated_at = now
    with connection.cursor() as cursor:
        cursor.execute(
            sql.COMPLETE_JOB,
            [*sql.values(job, sql.COMPLETION_COLUMNS), job.id, Job.Status.COMPLETED],
        )
        if cursor.rowcount == 0:  # completed meanwhile: the SQL guard kept the stored result
            return Outcome("duplicate", job.id)
    # Nothing to delete first: a job completes from in_progress or a sweeper close, and
    # failed tests are stored only with a completion.
    _store_failed_tests(job, data)
    return Outcome("updated", job.id)


def _apply_completion(job: Job, data: CallbackData, now: dt.datetime) -> None:
    job.status = Job.Status.COMPLETED
    job.conclusion = data.conclusion
    job.completed_received_at = now
    # A reported completion time is kept for display, never later than its receipt.
    job.reported_completed_at = min(data.completed_at, now) if data.completed_at else None
    job.placed_at = now
    job.tests_passed = data.tests["passed"]
    job.tests_failed = data.tests["failed"]
    job.tests_skipped = data.tests["skipped"]
    job.tests_total = data.tests["total"]
    job.failed_tests_truncated = data.failed_tests_truncated
    job.artifact_url = data.artifact_url
    job.environment = data.environment
    job.triage_verdict = data.triage_verdict
    if data.started_at and job.reported_started_at is None:
        job.reported_started_at = data.started_at


def _imported_at(data: CallbackData, now: dt.datetime) -> dt.datetime:
    """Where imported history is placed: where it reportedly ran, never after its import
    (a time ahead of this server's clock would keep it out of every window until then)."""
    return min(data.completed_at or data.started_at or now, now)


def _apply_trusted_timing(
    job: Job, data: CallbackData, timing: TrustedTiming, now: dt.datetime
) -> None:
    """The relay's own measurements; imports also land where they ran (forwards at receipt)."""
    if job.source == Job.Source.IMPORT:
        job.placed_at = _imported_at(data, now)
        job.reported_completed_at = data.completed_at
    if timing.queue_seconds is not None:
        job.queue_seconds = timing.queue_seconds
    if timing.execution_seconds is not None:
        job.execution_seconds = timing.execution_seconds
    if timing.queue_seconds is not None or timing.execution_seconds is not None:
        job.timing_source = Job.TimingSource.FORWARD


def _store_failed_tests(job: Job, data: CallbackData) -> None:
    if not data.failed_tests:
        return
    columns = sql.failed_test_columns(job.id, data.failed_tests)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(sql.INSERT_FAILED_TESTS_UNNEST, columns)
        else:
            cursor.executemany(sql.INSERT_FAILED_TEST, list(zip(*columns, strict=True)))
