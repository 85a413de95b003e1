"""The periodic jobs, one list shared by celery beat's tasks and `manage.py run_periodic`."""

from collections.abc import Callable

from hud import notifications, promotion, relay
from hud.checks import mirror
from hud.ingestion import ingest

PERIODIC_JOBS: dict[str, Callable[[], object]] = {
    "sweep_zombies": ingest.sweep_zombies,
    "prune_used_tokens": ingest.prune_used_tokens,
    "reconcile_dispatches": relay.reconcile,
    "reconcile_mirror": mirror.reconcile,
    "daily_evaluation": promotion.daily_evaluation,
    "check_backends": notifications.check_backends,
    "reconcile_notifications": notifications.reconcile,
    # Last, after the sweeper and the daily evaluation have written: the backend pages' gates.
    "refresh_gates": promotion.refresh_gates,
}


def run_all() -> dict[str, object]:
    """Run every periodic job once; return what each reported."""
    return {name: job() for name, job in PERIODIC_JOBS.items()}
