"""Timing figures: queue, execution and end-to-end seconds per attempt, and overruns.

Timing is per attempt (each attempt used a runner), placed by the attempt's own `placed_at`;
skipped attempts never used a runner and are left out (`timed_attempts`).
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd

from hud.stats.frames import Jobs, _in_window, prepare
from hud.stats.intervals import (
    DEFAULT_MIN_N,
    SPREAD_LOOKBACK,
    Estimate,
    day_clustered_proportion,
    mean_estimate,
    percentile_estimate,
)

OVERRUN_SECONDS = 3 * 3600.0


def timed_attempts(df: Jobs, start: dt.datetime, end: dt.datetime) -> pd.DataFrame:
    """Completed, not skipped attempts placed in the window: the population of timing figures."""
    rows = prepare(df).timed
    return rows[_in_window(rows["placed_at"], start, end)]


def end_to_end_seconds(rows: pd.DataFrame) -> pd.Series:
    """Queue + execution seconds; execution alone when queue time is unknown (re-runs)."""
    queue = rows["queue_seconds"]
    execution = rows["execution_seconds"]
    return execution + queue.fillna(0.0).where(execution.notna())


def overrun_flags(rows: pd.DataFrame) -> pd.Series:
    """True over 3 h end to end, False under, NA when unknown; sweeper-closed jobs overran."""
    e2e = end_to_end_seconds(rows).to_numpy()
    # The sweeper closes jobs left in_progress for 6 h, so they ran past 3 h by construction.
    swept = rows["closed_by_sweeper"].to_numpy(dtype=bool)
    unknown = np.isnan(e2e) & ~swept
    flags = pd.arrays.BooleanArray(swept | (e2e > OVERRUN_SECONDS), unknown)
    return pd.Series(flags, index=rows.index)


def overrun_rate(
    df: Jobs, start: dt.datetime, end: dt.datetime, *, min_n: int = DEFAULT_MIN_N
) -> Estimate:
    """Share of timed attempts over 3 h end to end (attempts with unknown duration excluded)."""
    lookback_start = min(pd.Timestamp(start), pd.Timestamp(end) - SPREAD_LOOKBACK)
    rows = timed_attempts(df, lookback_start, end)
    flags = overrun_flags(rows).array
    known = ~flags.isna()
    return day_clustered_proportion(
        rows["placed_at"].values[known],
        flags.to_numpy(bool, na_value=False)[known],
        start,
        end,
        min_n=min_n,
    )


def timing_estimates(
    df: Jobs, start: dt.datetime, end: dt.datetime, *, min_n: int = DEFAULT_MIN_N
) -> dict[str, Estimate]:
    """Mean, P50 and P95 of queue, execution and end-to-end seconds over the window."""
    rows = timed_attempts(df, start, end)
    series = {
        "queue_seconds": rows["queue_seconds"],
        "execution_seconds": rows["execution_seconds"],
        "end_to_end_seconds": end_to_end_seconds(rows),
    }
    out: dict[str, Estimate] = {}
    for name, values in series.items():
        out[f"{name}_mean"] = mean_estimate(values, min_n=min_n)
        out[f"{name}_p50"] = percentile_estimate(values, 0.5, min_n=min_n)
        out[f"{name}_p95"] = percentile_estimate(values, 0.95, min_n=min_n)
    return out
