"""Thin Celery tasks (load by id, call a service), each with an explicit stable name.

With hud.periodic, the only modules that import the services to run them. Services hand work
to these tasks by name through hud.core.taskqueue.enqueue and never import this module.
"""

from typing import Any

from celery import shared_task

from hud import notifications, promotion, relay
from hud.checks import mirror
from hud.ingestion import ingest

TASK_OPTIONS: dict[str, Any] = {
    "acks_late": True,
    "autoretry_for": (Exception,),
    "dont_autoretry_for": (ValueError,),
    "retry_backoff": 5,
    "retry_backoff_max": 600,
    "retry_jitter": True,
    "max_retries": 8,
}


@shared_task(name="crcr.sweep_zombies", **TASK_OPTIONS)
def sweep_zombies() -> int:
    """Close jobs stuck in_progress past CRCR_ZOMBIE_TIMEOUT as timed_out."""
    return ingest.sweep_zombies()


@shared_task(name="crcr.prune_used_tokens", **TASK_OPTIONS)
def prune_used_tokens() -> int:
    """Forget expired OIDC token ids."""
    return ingest.prune_used_tokens()


# No retries: the backend page's next view schedules another refresh, and a refresh that fails
# for a lasting reason would only multiply the load.
@shared_task(name="crcr.refresh_gate", acks_late=True)
def refresh_gate(downstream_id: int) -> None:
    """Evaluate a backend's gate again after new results, for its page (promotion.snapshot)."""
    promotion.refresh_gate(int(downstream_id))


@shared_task(name="crcr.refresh_gates", **TASK_OPTIONS)
def refresh_gates() -> int:
    """Evaluate and keep every listed backend's gate for its page, before the kept one ages out."""
    return promotion.refresh_gates()


@shared_task(name="crcr.daily_evaluation", **TASK_OPTIONS)
def daily_evaluation() -> dict:
    """Evaluate every L2+ backend's gates for the day just ended; raise demotion warnings."""
    return promotion.daily_evaluation()


# --- The relay: dispatches (appended for the relay, part 1) -------------------------------


@shared_task(name="crcr.send_dispatch", bind=True, **TASK_OPTIONS)
def send_dispatch(self: Any, dispatch_id: int) -> str:
    """Send one pending repository_dispatch; retry retryable failures with backoff."""
    outcome = relay.send_dispatch(int(dispatch_id))
    on_worker = not getattr(self.request, "called_directly", True)
    if outcome.result == relay.SendResult.RETRY and on_worker:
        # GitHub's retry-after and the row's lease decide the wait, not the generic backoff.
        # In-process runs do not retry here: the periodic reconciler picks the row up.
        raise self.retry(countdown=outcome.retry_in, max_retries=None)
    return outcome.result.value


@shared_task(name="crcr.reconcile_dispatches", **TASK_OPTIONS)
def reconcile_dispatches() -> int:
    """Re-enqueue pending dispatches a lost enqueue or a failed attempt left behind."""
    return relay.reconcile()


# --- Notifications (appended for issue 8) --------------------------------------------------


@shared_task(name="crcr.send_notification", bind=True, **TASK_OPTIONS)
def send_notification(self: Any, notification_id: int) -> str:
    """Send one notification; a retryable failure is retried after the row's backoff."""
    outcome = notifications.deliver(int(notification_id))
    on_worker = not getattr(self.request, "called_directly", True)
    if outcome.result == "retry" and on_worker:
        # In-process runs do not retry here: the periodic reconciler picks the row up.
        raise self.retry(countdown=outcome.retry_in, max_retries=None)
    return outcome.result


@shared_task(name="crcr.reconcile_notifications", **TASK_OPTIONS)
def reconcile_notifications() -> int:
    """Re-enqueue notifications that are due: lost enqueues and retries after backoff."""
    return notifications.reconcile()


@shared_task(name="crcr.check_backends", **TASK_OPTIONS)
def check_backends() -> dict:
    """Notify stale or silent backends and repeated L4 gate failures."""
    return notifications.check_backends()


# --- The relay, part 2: check runs, the gate, re-runs, on-call comments (hud.checks.mirror) -------


def _retry_on_worker(task: Any, outcome: Any) -> str:
    """Retry a RETRY outcome after its own delay on a worker; in-process, the reconciler does."""
    on_worker = not getattr(task.request, "called_directly", True)
    if outcome.result == mirror.SyncResult.RETRY and on_worker:
        raise task.retry(countdown=outcome.retry_in, max_retries=None)
    return outcome.result.value


@shared_task(name="crcr.mirror_job", bind=True, **TASK_OPTIONS)
def mirror_job(self: Any, job_id: int) -> str:
    """Mirror one job's report: its check run, its SHA's gate, its backend's on-call comment."""
    return _retry_on_worker(self, mirror.mirror_job(int(job_id)))


@shared_task(name="crcr.sync_gate", bind=True, **TASK_OPTIONS)
def sync_gate(self: Any, head_sha: str) -> str:
    """Post or update the `crcr/gate` check of one head SHA."""
    return _retry_on_worker(self, mirror.sync_gate(str(head_sha)))


@shared_task(name="crcr.mirror_backfill", **TASK_OPTIONS)
def mirror_backfill(head_sha: str) -> int:
    """After a `ciflow/crcr/*` label: enqueue check runs for jobs already on that head SHA."""
    return mirror.backfill(str(head_sha))


@shared_task(name="crcr.send_rerun", bind=True, **TASK_OPTIONS)
def send_rerun(self: Any, rerun_id: int) -> str:
    """Ask GitHub to re-run one downstream run (re-requested from the upstream PR)."""
    return _retry_on_worker(self, mirror.send_rerun(int(rerun_id)))


@shared_task(name="crcr.sync_oncall_comment", bind=True, **TASK_OPTIONS)
def sync_oncall_comment(self: Any, pr_number: int, downstream_id: int) -> str:
    """Post or edit in place a backend's on-call comment on a PR."""
    return _retry_on_worker(self, mirror.sync_oncall_comment(int(pr_number), int(downstream_id)))


@shared_task(name="crcr.reconcile_mirror", **TASK_OPTIONS)
def reconcile_mirror() -> dict:
    """Re-enqueue check runs, gates, comments and re-runs that did not reach GitHub."""
    return mirror.reconcile()
