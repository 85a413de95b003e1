"""Enqueue a Celery task by its stable name, after the current transaction commits.

Services call `enqueue("crcr.mirror_job", job.id)`; they never import the task module
(hud.tasks), which imports them. With CELERY_BROKER_URL set the task is sent to the broker
after commit. Without a broker (the embedded default) it runs after commit on a small
in-process thread pool, never inside the request that enqueued it. A task may be held back a
few seconds after the commit (`delay`): the broker's countdown, or a timer in-process. Tasks
are looked up by name in Celery's registry, which hud.apps fills by importing hud.tasks when
Django starts.
"""

from __future__ import annotations

import functools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import close_old_connections, transaction

from config.logging_context import REQUEST_ID_TASK_HEADER, current_request_id, request_id_var

logger = logging.getLogger(__name__)
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _in_process_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=settings.CRCR_INPROCESS_WORKERS, thread_name_prefix="crcr-task"
            )
        return _pool


def in_process_queue_depth() -> int:
    """How many handed tasks wait for a thread of the in-process pool (0 before its first)."""
    pool = _pool
    return pool._work_queue.qsize() if pool is not None else 0


def task_named(task: str | Any) -> Any:
    """The registered Celery task of a stable name (a task object is returned as it is)."""
    return current_app.tasks[task] if isinstance(task, str) else task


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


def _send_to_broker(
    task: Any, args: tuple, request_id: str | None = None, delay: float = 0
) -> None:
    # The enqueuing request's id rides along; config.celery binds it on the worker.
    options: dict[str, Any] = {"args": args, "headers": {REQUEST_ID_TASK_HEADER: request_id}}
    if delay:
        options["countdown"] = delay
    try:
        task_named(task).apply_async(**options)
    except Exception:
        # The broker is down (Redis stopped). The work is already committed and the periodic
        # reconcilers re-send it; raising here would turn a stored callback into a 500.
        logger.exception(
            "could not enqueue task; the reconciler will re-send it",
            extra={"task": task if isinstance(task, str) else task.name},
        )


def _later(seconds: float, work: Any) -> None:
    """Call `work()` on a timer thread once `seconds` have passed (it never holds up an exit)."""
    timer = threading.Timer(seconds, work)
    timer.daemon = True
    timer.start()


def enqueue(task: str | Any, *args: Any, delay: float = 0) -> None:
    """Run the task named `task` with `args` after the current transaction commits, and at
    least `delay` seconds after it when given.

    `task` is a stable task name ("crcr.mirror_job"); a task object works too. A broker that
    refuses the message is logged, never raised: the request that committed the work still
    succeeds, and the periodic reconcilers pick the work up from the database.
    """
    request_id = current_request_id()  # the task's log lines carry the enqueuing request's id
    if settings.CELERY_BROKER_URL:
        transaction.on_commit(lambda: _send_to_broker(task, args, request_id, delay))
        return
    runner = functools.partial(_run_in_process, request_id=request_id)

    def hand_over() -> None:
        _in_process_pool().submit(runner, task_named(task), args)

    transaction.on_commit(lambda: _later(delay, hand_over) if delay else hand_over())
