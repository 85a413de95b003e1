"""Is a backend alive: stuck attempts, liveness of dispatches, last result, days of data."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from hud.stats.frames import Jobs, _in_window, prepare
from hud.stats.intervals import DEFAULT_MIN_N, Estimate, proportion

DEFAULT_STUCK_AFTER = dt.timedelta(hours=3)
# Fewer completed results than this give no usual gap (`usual_gap_seconds`).
MIN_RESULTS_FOR_GAP = 5
USUAL_GAP_QUANTILE = 0.9


def is_stuck(
    status: str,
    in_progress_received_at: dt.datetime | None,
    placed_at: dt.datetime,
    now: dt.datetime,
    threshold: dt.timedelta = DEFAULT_STUCK_AFTER,
) -> bool:
    """One attempt still in_progress longer than `threshold` at `now` (the `stuck_jobs` rule)."""
    return status == "in_progress" and (in_progress_received_at or placed_at) < now - threshold


def stuck_jobs(
    df: Jobs, now: dt.datetime, threshold: dt.timedelta = DEFAULT_STUCK_AFTER
) -> pd.DataFrame:
    """Attempts still in_progress longer than `threshold` at `now` (since in_progress receipt)."""
    rows = prepare(df).rows
    return rows[stuck_mask(rows["status"], rows, now, threshold)]


def stuck_mask(
    status: pd.Series,
    times: pd.DataFrame,
    now: dt.datetime,
    threshold: dt.timedelta = DEFAULT_STUCK_AFTER,
) -> pd.Series:
    """`is_stuck` of every row at once: `status` in_progress and the row's in_progress receipt
    (else its placement, columns of `times`) more than `threshold` before `now`."""
    since = times["in_progress_received_at"].fillna(times["placed_at"])
    return (status == "in_progress") & (since < pd.Timestamp(now) - pd.Timedelta(threshold))


@dataclass(frozen=True)
class Liveness:
    """Share of dispatches to an L2+ backend that got any callback, and time since the last."""

    answered: Estimate
    seconds_since_last_result: float | None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return {
            "answered": self.answered.to_dict(),
            "seconds_since_last_result": self.seconds_since_last_result,
        }


def liveness(
    answered: int,
    dispatched: int,
    last_result_at: dt.datetime | None,
    now: dt.datetime,
    *,
    min_n: int = DEFAULT_MIN_N,
) -> Liveness:
    """Liveness from counts the caller has (answered ≤ dispatched) and the last result time."""
    answered = min(answered, dispatched)
    since = None if last_result_at is None else (now - last_result_at).total_seconds()
    return Liveness(proportion(answered, dispatched, min_n=min_n), since)


def last_result_at(df: Jobs) -> dt.datetime | None:
    """placed_at of the most recent completed attempt, or None."""
    df = prepare(df).rows
    done = df.loc[df["status"] == "completed", "placed_at"]
    return None if done.empty else done.max().to_pydatetime()


def days_of_data(df: Jobs, start: dt.datetime, end: dt.datetime) -> int:
    """Distinct UTC days with at least one completed job placed in the window."""
    df = prepare(df).rows
    rows = df[(df["status"] == "completed") & _in_window(df["placed_at"], start, end)]
    return int(rows["placed_at"].dt.floor("D").nunique())


def usual_gap_seconds(times: np.ndarray) -> float | None:
    """How long a backend usually goes between results: the 90th percentile (linear) of the
    gaps between consecutive completed attempts (epoch seconds, any order); None with fewer
    than `MIN_RESULTS_FOR_GAP` results."""
    ordered = np.sort(times[~np.isnan(times)])
    if len(ordered) < MIN_RESULTS_FOR_GAP:
        return None
    return float(np.quantile(np.diff(ordered), USUAL_GAP_QUANTILE))
