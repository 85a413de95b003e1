"""Re-runs of downstream runs when a reviewer re-requests one of our check runs or the suite.

`request_reruns` records what a `rerequested` webhook asks for (only for backends at L3 or
above) and enqueues it; `send_rerun` asks GitHub once, under a claim, and treats an already
running run as done.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, Q

from hud import github, levels
from hud.checks.check_runs import CHECK_NAME_PREFIX
from hud.checks.gate import GATE_NAME
from hud.checks.scope import _effective_level
from hud.checks.sync import MIRROR_ERRORS, SyncOutcome, SyncResult, _error_text, _max_attempts
from hud.core import clock, taskqueue
from hud.models import CheckRunMirror, Delivery, Downstream, Job, Level, RerunRequest, claims

logger = logging.getLogger(__name__)

_EXTERNAL_ID_RE = re.compile(r"^(\d{1,18}):(\d{1,10})$")


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
