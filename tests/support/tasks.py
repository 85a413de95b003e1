"""Pytest plugin: tasks handed to the in-process pool run at once, in the test's thread."""

from dataclasses import dataclass, field
from typing import Any

import pytest

from hud.core import taskqueue


@dataclass
class InlineTasks:
    """Stands in for the in-process pool: runs each handed task at once, in this thread."""

    ran: list[tuple[str, tuple, Any]] = field(default_factory=list)

    def submit(self, runner: Any, task: Any, args: tuple) -> None:
        """Run `task(*args)` now and record what it returned."""
        self.ran.append((task.name, args, task.run(*args)))


@pytest.fixture
def inline_tasks(monkeypatch: pytest.MonkeyPatch, settings: Any) -> InlineTasks:
    """No broker, and tasks handed to the in-process pool run in the test's transaction."""
    settings.CELERY_BROKER_URL = None
    inline = InlineTasks()
    monkeypatch.setattr(taskqueue, "_in_process_pool", lambda: inline)
    return inline
