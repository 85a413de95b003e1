"""Thin Celery tasks (load by id, call a service) and how work is handed to them.

With CELERY_BROKER_URL set, `enqueue` sends the task to the broker after the transaction
commits. Without a broker (the embedded default) the task runs after commit on a small
in-process thread pool, never inside the request that enqueued it.
"""

import functools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import close_old_connections, transaction

from config.logging_context import REQUEST_ID_TASK_HEADER, current_request_id, request_id_var
from hud import promotion
from hud.ingestion import ingest

logger = logging.getLogger(__name__)
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()

TASK_OPTIONS: dict[str, Any] = {
    "acks_late": True,
    "autoretry_for": (Exception,),
    "dont_autoretry_for": (ValueError,),
    "retry_backoff": 5,
    "retry_backoff_max": 600,
    "retry_jitter": True,
    "max_retries": 8,
}


def _in_process_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=settings.CRCR_INPROCESS_WORKERS, thread_name_prefix="crcr-task"
            )
        return _pool


def _run_in_process(task: Any, args: tuple, request_id: str | None = None) -> None:
    close_old_connections()
    # The pool's threads do not share the request's context: carry its id over for the logs.
    request_id_var.set(request_id)
    try:
        task.run(*args)
    except Exception:
        # The periodic reconciler re-enqueues what a failed in-process run left behind.
        logger.exception("in-process task failed", extra={"task": task.name})
    finally:
        request_id_var.set(None)
        close_old_connections()


def _send_to_broker(task: Any, args: tuple, request_id: str | None = None) -> None:
    try:
        # The enqueuing request's id rides along; config.celery binds it on the worker.
        task.apply_async(args=args, headers={REQUEST_ID_TASK_HEADER: request_id})
    except Exception:
        # The broker is down (Redis stopped). The work is already committed and the periodic
        # reconcilers re-send it; raising here would turn a stored callback into a 500.
        logger.exception(
            "could not enqueue task; the reconciler will re-send it", extra={"task": task.name}
        )


def enqueue(task: Any, *args: Any) -> None:
    """Run `task(*args)` after the current transaction commits, on the broker or in-process.

    A broker that refuses the message is logged, never raised: the request that committed the
    work still succeeds, and the periodic reconcilers pick the work up from the database.
    """
    request_id = current_request_id()  # the task's log lines carry the enqueuing request's id
    if settings.CELERY_BROKER_URL:
        transaction.on_commit(lambda: _send_to_broker(task, args, request_id))
    else:
        runner = functools.partial(_run_in_process, request_id=request_id)
        transaction.on_commit(lambda: _in_process_pool().submit(runner, task, args))


@shared_task(name="crcr.sweep_zombies", **TASK_OPTIONS)
def sweep_zombies() -> int:
    """Close jobs stuck in_progress past CRCR_ZOMBIE_TIMEOUT as timed_out."""
    return ingest.sweep_zombies()


@shared_task(name="crcr.prune_used_tokens", **TASK_OPTIONS)
def prune_used_tokens() -> int:
    """Forget expired OIDC token ids."""
    return ingest.prune_used_tokens()


@shared_task(name="crcr.daily_evaluation", **TASK_OPTIONS)
def daily_evaluation() -> dict:
    """Evaluate every L2+ backend's gates for the day just ended; raise demotion warnings."""
    return promotion.daily_evaluation()


# --- The relay: dispatches (appended for the relay, part 1) -------------------------------


@shared_task(name="crcr.send_dispatch", bind=True, **TASK_OPTIONS)
def send_dispatch(self: Any, dispatch_id: int) -> str:
    """Send one pending repository_dispatch; retry retryable failures with backoff."""
    from hud import relay

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
    from hud import relay

    return relay.reconcile()


# --- Notifications (appended for issue 8) --------------------------------------------------


@shared_task(name="crcr.send_notification", bind=True, **TASK_OPTIONS)
def send_notification(self: Any, notification_id: int) -> str:
    """Send one notification; a retryable failure is retried after the row's backoff."""
    from hud import notifications

    outcome = notifications.deliver(int(notification_id))
    on_worker = not getattr(self.request, "called_directly", True)
    if outcome.result == "retry" and on_worker:
        # In-process runs do not retry here: the periodic reconciler picks the row up.
        raise self.retry(countdown=outcome.retry_in, max_retries=None)
    return outcome.result


@shared_task(name="crcr.reconcile_notifications", **TASK_OPTIONS)
def reconcile_notifications() -> int:
    """Re-enqueue notifications that are due: lost enqueues and retries after backoff."""
    from hud import notifications

    return notifications.reconcile()


@shared_task(name="crcr.check_backends", **TASK_OPTIONS)
def check_backends() -> dict:
    """Notify stale or silent backends and repeated L4 gate failures."""
    from hud import notifications

    return notifications.check_backends()


# --- The relay, part 2: check runs, the gate, re-runs, on-call comments (hud.checks.mirror) -------


def _retry_on_worker(task: Any, outcome: Any) -> str:
    """Retry a RETRY outcome after its own delay on a worker; in-process, the reconciler does."""
    from hud.checks import mirror

    on_worker = not getattr(task.request, "called_directly", True)
    if outcome.result == mirror.SyncResult.RETRY and on_worker:
        raise task.retry(countdown=outcome.retry_in, max_retries=None)
    return outcome.result.value


@shared_task(name="crcr.mirror_job", bind=True, **TASK_OPTIONS)
def mirror_job(self: Any, job_id: int) -> str:
    """Mirror one job's report: its check run, its SHA's gate, its backend's on-call comment."""
    from hud.checks import mirror

    return _retry_on_worker(self, mirror.mirror_job(int(job_id)))


@shared_task(name="crcr.sync_gate", bind=True, **TASK_OPTIONS)
def sync_gate(self: Any, head_sha: str) -> str:
    """Post or update the `crcr/gate` check of one head SHA."""
    from hud.checks import mirror

    return _retry_on_worker(self, mirror.sync_gate(str(head_sha)))


@shared_task(name="crcr.mirror_backfill", **TASK_OPTIONS)
def mirror_backfill(head_sha: str) -> int:
    """After a `ciflow/crcr/*` label: enqueue check runs for jobs already on that head SHA."""
    from hud.checks import mirror

    return mirror.backfill(str(head_sha))


@shared_task(name="crcr.send_rerun", bind=True, **TASK_OPTIONS)
def send_rerun(self: Any, rerun_id: int) -> str:
    """Ask GitHub to re-run one downstream run (re-requested from the upstream PR)."""
    from hud.checks import mirror

    return _retry_on_worker(self, mirror.send_rerun(int(rerun_id)))


@shared_task(name="crcr.sync_oncall_comment", bind=True, **TASK_OPTIONS)
def sync_oncall_comment(self: Any, pr_number: int, downstream_id: int) -> str:
    """Post or edit in place a backend's on-call comment on a PR."""
    from hud.checks import mirror

    return _retry_on_worker(self, mirror.sync_oncall_comment(int(pr_number), int(downstream_id)))


@shared_task(name="crcr.reconcile_mirror", **TASK_OPTIONS)
def reconcile_mirror() -> dict:
    """Re-enqueue check runs, gates, comments and re-runs that did not reach GitHub."""
    from hud.checks import mirror

    return mirror.reconcile()
