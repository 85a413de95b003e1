"""Thin Celery tasks (load by id, call a service) and how work is handed to them.

With CELERY_BROKER_URL set, `enqueue` sends the task to the broker after the transaction
commits. Without a broker (the embedded default) the task runs after commit on a small
in-process thread pool, never inside the request that enqueued it.
"""

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import close_old_connections, transaction

from hud import ingest, promotion

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


def _run_in_process(task: Any, args: tuple) -> None:
    close_old_connections()
    try:
        task.run(*args)
    except Exception:
        # The periodic reconciler re-enqueues what a failed in-process run left behind.
        logger.exception("in-process task failed", extra={"task": task.name})
    finally:
        close_old_connections()


def enqueue(task: Any, *args: Any) -> None:
    """Run `task(*args)` after the current transaction commits, on the broker or in-process."""
    if settings.CELERY_BROKER_URL:
        transaction.on_commit(lambda: task.apply_async(args=args))
    else:
        transaction.on_commit(lambda: _in_process_pool().submit(_run_in_process, task, args))


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
