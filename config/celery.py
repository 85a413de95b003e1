"""Celery application for production (a worker and beat against Redis).

Without CELERY_BROKER_URL the embedded default never talks to a broker: hud.tasks hands
work to an in-process pool after commit instead.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("crcr_hud")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

app.conf.beat_schedule = {
    "crcr.sweep_zombies": {"task": "crcr.sweep_zombies", "schedule": 300.0},
    "crcr.prune_used_tokens": {"task": "crcr.prune_used_tokens", "schedule": 3600.0},
    "crcr.reconcile_dispatches": {"task": "crcr.reconcile_dispatches", "schedule": 60.0},
    # Relay part 2: check runs, gates, comments and re-runs that did not reach GitHub.
    "crcr.reconcile_mirror": {"task": "crcr.reconcile_mirror", "schedule": 60.0},
    # Idempotent per day: hourly runs make a missed one harmless.
    "crcr.daily_evaluation": {"task": "crcr.daily_evaluation", "schedule": 3600.0},
    # Notifications: stale/silent/gate-failure checks, and re-sending what is due.
    "crcr.check_backends": {"task": "crcr.check_backends", "schedule": 900.0},
    "crcr.reconcile_notifications": {"task": "crcr.reconcile_notifications", "schedule": 60.0},
}
