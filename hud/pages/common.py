"""What several HUD pages share: the window, a backend's state, display statuses, staleness.

Also the small helpers more than one page needs: the latest attempts with their display
status, badges, and the embed's state words.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from hud import attribution, stats
from hud.reads import selectors

if TYPE_CHECKING:
    from hud.models import DemotionWarning, GateEvaluation, PromotionRequest


DEFAULT_DAYS = 7
MAX_DAYS = 90
METRICS_DEFAULT_DAYS = 30
PR_EVENTS = ("pull_request", "push")
NIGHTLY_EVENTS = ("nightly", "periodic")
# A backend is stale when its last result is older than this many of its usual gaps.
STALE_GAP_FACTOR = 2.0
STALE_MIN_SECONDS = 3600.0
# Display statuses that make a job count as failing, or as still running (embed, cards).
EMBED_FAILING = ("failure", "timed_out", "stuck")
EMBED_PENDING = ("in_progress",)


@dataclass(frozen=True)
class Window:
    """A page's half-open time window [start, end) of `days` days ending now."""

    days: int
    start: dt.datetime
    end: dt.datetime

    @classmethod
    def ending(cls, now: dt.datetime, days: int) -> Window:
        """The window of `days` days ending at `now`."""
        return cls(days, now - dt.timedelta(days=days), now)

    @property
    def calendar_days(self) -> int:
        """UTC dates the window touches: `days` + 1 unless it starts at midnight."""
        last = (self.end - dt.timedelta(microseconds=1)).date()
        return (last - self.start.date()).days + 1


@dataclass(frozen=True)
class BackendState:
    """What needs a decision about a backend now: a warning, a pending request, the gate."""

    warning: DemotionWarning | None = None
    overdue: bool = False
    pending: PromotionRequest | None = None
    evaluation: GateEvaluation | None = None

    @property
    def demoting(self) -> bool:
        """The latest daily evaluation found a demotion rule holding."""
        return self.evaluation is not None and self.evaluation.retention == "demote"

    @property
    def at_risk(self) -> bool:
        """An open demotion warning or a demoting gate: shown and sorted as bad."""
        return self.warning is not None or self.demoting


# Daily evaluations older than this are not news (the evaluation runs every day).
STATE_EVALUATION_DAYS = 2


def backend_states(downstream_ids: list[int], now: dt.datetime) -> dict[int, BackendState]:
    """Each backend's state for `/crcr` and its page, in three queries for any count."""
    warnings = selectors.open_warnings(downstream_ids)
    pending = selectors.pending_requests(downstream_ids)
    since = (now - dt.timedelta(days=STATE_EVALUATION_DAYS)).date()
    evaluations = selectors.latest_evaluations(downstream_ids, since)
    return {
        backend_id: BackendState(
            warning=warnings.get(backend_id),
            overdue=backend_id in warnings and warnings[backend_id].deadline < now.date(),
            pending=pending.get(backend_id),
            evaluation=evaluations.get(backend_id),
        )
        for backend_id in downstream_ids
    }


def cell_status(status: str, conclusion: str, stuck: bool) -> str:
    """The display status of one attempt: its conclusion, in_progress or stuck."""
    if status != "completed":
        return "stuck" if stuck else "in_progress"
    return conclusion or "neutral"


def is_stale(last_result_at: dt.datetime | None, usual_gap: float | None, window: Window) -> bool:
    """No result for longer than twice the usual gap (or none in the window at all)."""
    if last_result_at is None:
        return True
    silence = (window.end - last_result_at).total_seconds()
    if usual_gap is None:
        return last_result_at < window.start
    return silence > max(STALE_GAP_FACTOR * usual_gap, STALE_MIN_SECONDS)


def logical_with_status(latest: pd.DataFrame, now: dt.datetime) -> pd.DataFrame:
    """The latest attempt of each logical job of a frame read from the derived layer
    (`hud.reads.logical`) with its display status (`cell_status`, as arrays): stuck is judged
    on the latest attempt's own row (`stats.stuck_mask`)."""
    stuck = stats.stuck_mask(latest["row_status"], latest, now).to_numpy()
    conclusion = latest["conclusion"].to_numpy(dtype=object)
    display = np.where(
        latest["status"].to_numpy() == "completed",
        np.where(conclusion == "", "neutral", conclusion),
        np.where(stuck, "stuck", "in_progress"),
    ).astype(object)
    return latest.assign(display=pd.Series(display, index=latest.index, dtype=object))


def badge_dict(verdict: str) -> dict[str, str]:
    """A verdict's badge as the verdict dicts carry it: css, symbol, word, meaning."""
    return badge(attribution.BADGES, verdict)


def badge(table: dict[str, tuple[str, str, str, str]], key: str) -> dict[str, str]:
    """`key`'s row of a badge table as a dict: css, symbol, word, meaning."""
    css, symbol, word, meaning = table.get(key, ("none", "·", key or "unknown", ""))
    return {"css": css, "symbol": symbol, "word": word, "meaning": meaning}


def embed_state(failing: int, pending: int) -> str:
    """Jobs' state: failure if any fails, in_progress while any runs, else success."""
    if failing:
        return "failure"
    return "in_progress" if pending else "success"
