"""Celery application for production (a worker and beat against Redis).

Without CELERY_BROKER_URL the embedded default never talks to a broker: hud.tasks hands
work to an in-process pool after commit instead.
"""

import logging
import os
from typing import Any

from celery import Celery
from celery.apps.beat import Beat
from celery.beat import Service
from celery.platforms import signals
from celery.signals import (
    setup_logging,
    task_postrun,
    task_prerun,
    worker_process_init,
    worker_ready,
    worker_shutting_down,
)
from kombu.utils.objects import cached_property

from config.logging_context import request_id_var, task_request_id
from hud.core import leases
from hud.core.process import freeze_startup_objects

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
logger = logging.getLogger(__name__)


class StopCleanlyBeat(Beat):
    """`celery beat` that survives a SIGTERM landing while it builds its scheduler.

    Celery's handler saves the schedule (`service.sync()`) and exits. Right after "beat:
    Starting..." the scheduler is still being built (importing modules, opening the schedule
    file), and saving builds it a second time, inside the first: circular imports, a shelve
    opened twice, the schedule file removed as "corrupted" and a plain-text traceback on stderr
    (systemd stopping beat just after a start does that). Until the scheduler exists, the
    handler only marks the service shut down: it finishes building, never ticks, and saves on
    its way out as usual. Marked, not `stop()`ped: that logs, and a log write from a handler
    that interrupted one (beat's "Starting..." to a full pipe) fails as a reentrant call.
    """

    def install_sync_handler(self, service: Service) -> None:
        def _sync(signum: int, frame: Any) -> None:
            if "scheduler" not in vars(service):  # kombu's cached_property, not built yet
                service._is_shutdown.set()  # what `Service.start`'s loop checks
                return
            service.sync()
            raise SystemExit()

        signals.update(SIGTERM=_sync, SIGINT=_sync)


class HudCelery(Celery):
    """Celery whose `celery beat` runs `StopCleanlyBeat` (`Beat` is the name Celery reads)."""

    @cached_property
    def Beat(self) -> type[Beat]:
        return self.subclass_with_self(StopCleanlyBeat)


app = HudCelery("crcr_hud")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

app.conf.beat_schedule = {
    "crcr.sweep_zombies": {"task": "crcr.sweep_zombies", "schedule": 300.0},
    "crcr.prune_used_tokens": {"task": "crcr.prune_used_tokens", "schedule": 3600.0},
    # Every 20 s: with hud.core.leases' 20 s heartbeat, a lost worker's sends are redone
    # within a minute (docs/operations.md).
    "crcr.reconcile_dispatches": {"task": "crcr.reconcile_dispatches", "schedule": 20.0},
    # Relay part 2: check runs, gates, comments and re-runs that did not reach GitHub.
    "crcr.reconcile_mirror": {"task": "crcr.reconcile_mirror", "schedule": 20.0},
    # Idempotent per day: hourly runs make a missed one harmless.
    "crcr.daily_evaluation": {"task": "crcr.daily_evaluation", "schedule": 3600.0},
    # Notifications: stale/silent/gate-failure checks, and re-sending what is due.
    "crcr.check_backends": {"task": "crcr.check_backends", "schedule": 900.0},
    "crcr.reconcile_notifications": {"task": "crcr.reconcile_notifications", "schedule": 60.0},
    # The backend pages' kept gates, refreshed before they age out (CRCR_GATE_SNAPSHOT_SECONDS,
    # 300 by default), so a page is evaluated on its view only after an admin change.
    "crcr.refresh_gates": {"task": "crcr.refresh_gates", "schedule": 240.0},
}


@task_prerun.connect
def _bind_request_id(task: Any = None, task_id: str | None = None, **kwargs: Any) -> None:
    """A task's log lines carry the id of the request that enqueued it (none for beat's).

    Its own id lets a redelivery take back the leases a dead run of it left (hud.core.leases).
    """
    request_id_var.set(task_request_id(task.request) if task is not None else None)
    leases.current_task_id.set(task_id)


@task_postrun.connect
def _forget_request_id(**kwargs: Any) -> None:
    """The worker's next task starts without an id of its own."""
    request_id_var.set(None)
    leases.current_task_id.set(None)


@setup_logging.connect
def _use_django_logging(**kwargs: Any) -> None:
    """Keep Django's LOGGING on workers and beat (JSON lines with the request id).

    With a receiver here Celery does not replace the root logger's handlers with its own.
    """
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)


@worker_process_init.connect
def _beat_from_pool_process(**kwargs: Any) -> None:
    """A prefork pool process runs tasks, so it names their claims and keeps them alive, and
    leaves what start-up made to the garbage collector no more."""
    leases.start_heartbeat()
    freeze_startup_objects()


@worker_ready.connect
def _beat_from_worker(**kwargs: Any) -> None:
    """Thread and solo pools run tasks in the worker process itself (hud.core.leases)."""
    leases.start_heartbeat()
    freeze_startup_objects()


@worker_ready.connect
def _log_warm_shutdown_as_json(sender: Any = None, **kwargs: Any) -> None:
    """Re-install the SIGTERM handler without its plain-text print to stdout.

    _log_shutdown below writes the same notice as a JSON line (run with `celery --quiet`, so
    no banner either: every line a worker writes is JSON).
    """
    from celery.apps.worker import install_worker_term_handler

    install_worker_term_handler(sender.controller, verbose=False)


@worker_shutting_down.connect
def _log_shutdown(sig: str = "", how: str = "", exitcode: int = 0, **kwargs: Any) -> None:
    """The worker was told to stop (SIGTERM: finish the running tasks, then exit)."""
    logger.info("worker shutting down", extra={"signal": sig, "how": how, "exitcode": exitcode})
