"""Long-lived processes take what start-up made out of the garbage collector's walks
(hud.core.process): a web worker once the WSGI module is imported, a Celery pool process once
it has started, `run_periodic --loop` before its first run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from config import celery as celery_app
from hud.management.commands import run_periodic

ROOT = Path(__file__).resolve().parents[2]


def test_a_web_worker_freezes_what_start_up_made():
    env = {**os.environ, "SECRET_KEY": "test-only", "DJANGO_SETTINGS_MODULE": "config.settings"}
    frozen = subprocess.run(
        [sys.executable, "-c", "import gc; import config.wsgi; print(gc.get_freeze_count())"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    # Django, the apps and their imports: tens of thousands of objects, none left to walk.
    assert int(frozen.stdout.split()[-1]) > 10_000


def test_celery_processes_freeze_once_started(monkeypatch):
    calls = []
    monkeypatch.setattr(celery_app.leases, "start_heartbeat", lambda: None)
    monkeypatch.setattr(celery_app, "freeze_startup_objects", lambda: calls.append("frozen"))
    celery_app._beat_from_pool_process()
    celery_app._beat_from_worker()
    assert calls == ["frozen", "frozen"]


def test_only_a_looping_run_periodic_freezes(monkeypatch):
    calls = []
    monkeypatch.setattr(run_periodic, "freeze_startup_objects", lambda: calls.append("frozen"))
    monkeypatch.setattr(run_periodic.periodic, "run_all", lambda: {})
    command = run_periodic.Command()
    command.handle(loop=False, interval=1)
    assert calls == []
    monkeypatch.setattr(run_periodic.time, "sleep", _stop)
    with pytest.raises(_Stopped):
        command.handle(loop=True, interval=1)
    assert calls == ["frozen"]


class _Stopped(Exception):
    """Ends the loop after its first run."""


def _stop(seconds: float) -> None:
    raise _Stopped
