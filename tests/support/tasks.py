"""Pytest plugin: tasks handed to the in-process pool run at once, in the test's thread (a
delayed one too: its delay is recorded, not waited for)."""

import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import connections

from hud.core import taskqueue


@dataclass
class InlineTasks:
    """Stands in for the in-process pool: runs each handed task at once, in this thread."""

    ran: list[tuple[str, tuple, Any]] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)  # what each delayed hand-over asked for

    def submit(self, runner: Any, task: Any, args: tuple) -> None:
        """Run `task(*args)` now and record what it returned."""
        self.ran.append((task.name, args, task.run(*args)))


@pytest.fixture
def inline_tasks(monkeypatch: pytest.MonkeyPatch, settings: Any) -> InlineTasks:
    """No broker, and tasks handed to the in-process pool run in the test's transaction."""
    settings.CELERY_BROKER_URL = None
    inline = InlineTasks()
    monkeypatch.setattr(taskqueue, "_in_process_pool", lambda: inline)

    def at_once(seconds: float, work: Any) -> None:
        inline.delays.append(seconds)
        work()

    monkeypatch.setattr(taskqueue, "_later", at_once)
    return inline


@pytest.fixture(scope="session", autouse=True)
def _pool_threads_let_go_of_the_test_database(django_db_setup):
    """Before the test database is dropped, every thread of the real in-process pool closes
    its connection (kept for CONN_MAX_AGE on PostgreSQL, as in production), which the drop
    would otherwise wait for and warn about."""
    yield
    pool = taskqueue._pool
    if pool is None:
        return
    # Each waits for all the others, so every one of the pool's threads closes its own.
    barrier = threading.Barrier(pool._max_workers, timeout=20)

    def close() -> None:
        connections.close_all()
        barrier.wait()

    for done in [pool.submit(close) for _ in range(pool._max_workers)]:
        done.result(timeout=30)
