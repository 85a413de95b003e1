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

A whole worker can also vanish (host lost, SIGKILL of the main process): then no message comes
back until the broker's visibility timeout, and only the reconcilers can redo the work. So
that they need not wait for the lease to run out (minutes), every process that runs tasks
keeps a heartbeat key in the cache (`start_heartbeat`, every `HEARTBEAT_SECONDS`, expiring
after `HEARTBEAT_TTL_SECONDS`), and each claim names the process that holds it. A claim whose
holder's heartbeat has expired is *abandoned*: the reconcilers re-enqueue its row and any run
may take it over. A process whose heartbeat expired is dead or frozen past the TTL, which is
longer than one GitHub request, so nothing it sent can still land. A finished attempt forgets
its claim (`forget`), so a row waiting out a retry delay is never taken early.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from contextvars import ContextVar

from django.conf import settings
from django.core.cache import cache

logger = logging.getLogger(__name__)

# The Celery task running in this context (bound by config.celery's task_prerun receiver).
current_task_id: ContextVar[str | None] = ContextVar("crcr_task_id", default=None)


# A task process renews its heartbeat this often; a heartbeat not renewed expires after the
# TTL, which is longer than a GitHub request (GITHUB_TIMEOUT, 10 s by default) and than two
# missed renewals.
HEARTBEAT_SECONDS = 5.0
HEARTBEAT_TTL_SECONDS = 20


def _key(kind: str, row_id: int) -> str:
    return f"crcr:lease:{kind}:{row_id}"


def _process() -> str:
    """This process, as a claim names its holder."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _heartbeat_key(process: str) -> str:
    return f"crcr:alive:{process}"


def beat() -> None:
    """Mark this process alive for the next HEARTBEAT_TTL_SECONDS."""
    cache.set(_heartbeat_key(_process()), 1, timeout=HEARTBEAT_TTL_SECONDS)


def start_heartbeat() -> threading.Thread:
    """Renew this process's heartbeat in a daemon thread (a Celery pool process or worker)."""

    def run() -> None:
        while True:
            try:
                beat()
            except Exception:  # a cache outage must not kill the thread; the next beat retries
                logger.warning("heartbeat not renewed", exc_info=True)
            time.sleep(HEARTBEAT_SECONDS)

    thread = threading.Thread(target=run, name="crcr-heartbeat", daemon=True)
    thread.start()
    return thread


def record(kind: str, row_id: int, claimed_at: dt.datetime, seconds: float) -> None:
    """Note that the running task (in this process) claimed `kind` row `row_id` at `claimed_at`."""
    task_id = current_task_id.get()
    if task_id is not None:
        held = (task_id, claimed_at.isoformat(), _process())
        cache.set(_key(kind, row_id), held, timeout=int(seconds) + 1)


def forget(kind: str, row_id: int) -> None:
    """The attempt that claimed the row is over: nobody may take its claim as abandoned."""
    cache.delete(_key(kind, row_id))


def _beating(held: list[tuple]) -> set[str]:
    """Of the processes holding these claims, those whose heartbeat is live (one cache read)."""
    keys = {_heartbeat_key(entry[2]): entry[2] for entry in held if len(entry) > 2}
    return {keys[key] for key in cache.get_many(list(keys))} if keys else set()


def _holder_gone(entry: tuple, beating: set[str]) -> bool:
    """A claim recorded with its process (every claim since heartbeats) whose process is gone."""
    return len(entry) > 2 and entry[2] not in beating


def takeover_stamp(kind: str, row_id: int) -> dt.datetime | None:
    """The claim stamp that the running task may take over, if any: one an earlier, dead run
    of this very task left, or one whose holding process is gone (abandoned)."""
    held = cache.get(_key(kind, row_id))
    if not held:
        return None
    task_id = current_task_id.get()
    if task_id is not None and held[0] == task_id:
        # A request the dead run had on the wire lands (or fails) within one request timeout.
        time.sleep(float(settings.GITHUB_TIMEOUT) + 1.0)
        return dt.datetime.fromisoformat(held[1])
    if _holder_gone(held, _beating([held])):
        return dt.datetime.fromisoformat(held[1])
    return None


def abandoned(kind: str, claims: Mapping[int, dt.datetime]) -> set[int]:
    """Of rows claimed at the given stamps (id → claimed_at), those whose holder is gone."""
    if not claims:
        return set()
    held = cache.get_many([_key(kind, row_id) for row_id in claims])
    beating = _beating(list(held.values()))
    return {
        row_id
        for row_id, stamp in claims.items()
        if (entry := held.get(_key(kind, row_id)))
        and dt.datetime.fromisoformat(entry[1]) == stamp
        and _holder_gone(entry, beating)
    }
