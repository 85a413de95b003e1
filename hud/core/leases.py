"""Who holds a lease on a row being sent to GitHub, so a redelivered task can take it back.

A sync claims its row with a timestamp (a lease: `hud.models.claims`, for hud.relay and
hud.checks) so that one worker at a time talks to GitHub for it. When a worker dies mid-task,
Celery delivers the same message again (`acks_late` + `task_reject_on_worker_lost`, or the
broker's visibility timeout after a lost worker), with the same task id; the dead run's lease
would otherwise keep the redelivered run out until it expires (minutes). The task id and the
claim stamp are recorded in the cache at each claim, and a run of the same task id may take
over that exact stamp.

That is safe because a message comes back only once its earlier run is over: the worker
process died, or the visibility timeout passed, which is longer than the hard time limit
that kills any run (config/settings.py). A retry is a new message with the same id, sent
only after the run that asked for it has returned. The one thing a dead run can leave behind
is a GitHub request already on the wire, so the new run first waits out one request timeout.
"""

from __future__ import annotations

import datetime as dt
import time
from contextvars import ContextVar

from django.conf import settings
from django.core.cache import cache

# The Celery task running in this context (bound by config.celery's task_prerun receiver).
current_task_id: ContextVar[str | None] = ContextVar("crcr_task_id", default=None)


def _key(kind: str, row_id: int) -> str:
    return f"crcr:lease:{kind}:{row_id}"


def record(kind: str, row_id: int, claimed_at: dt.datetime, seconds: float) -> None:
    """Note that the running task claimed `kind` row `row_id` at `claimed_at`."""
    task_id = current_task_id.get()
    if task_id is not None:
        cache.set(_key(kind, row_id), (task_id, claimed_at.isoformat()), timeout=int(seconds) + 1)


def left_by_this_task(kind: str, row_id: int) -> dt.datetime | None:
    """The claim stamp an earlier, dead run of the running task left on the row, if any."""
    task_id = current_task_id.get()
    held = cache.get(_key(kind, row_id)) if task_id is not None else None
    if not held or held[0] != task_id:
        return None
    # A request the dead run had on the wire lands (or fails) within one request timeout.
    time.sleep(float(settings.GITHUB_TIMEOUT) + 1.0)
    return dt.datetime.fromisoformat(held[1])
