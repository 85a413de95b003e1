"""The daily series: one row per UTC day of pass rate, counts and durations (the charts)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd

from hud.stats.frames import Jobs, prepare
from hud.stats.intervals import DEFAULT_MIN_N, wilson_intervals
from hud.stats.outcomes import COUNTED
from hud.stats.timing import _timed, end_to_end_seconds


def day_index(start: dt.date | dt.datetime, end: dt.date | dt.datetime) -> pd.DatetimeIndex:
    """The UTC midnights of the days that [start, end) touches."""
    first = pd.Timestamp(start)
    last = pd.Timestamp(end)
    first = first.tz_localize("UTC") if first.tzinfo is None else first.tz_convert("UTC")
    last = last.tz_localize("UTC") if last.tzinfo is None else last.tz_convert("UTC")
    return pd.date_range(first.floor("D"), last.ceil("D"), freq="D", inclusive="left")


DAILY_COLUMNS = [
    "day",
    "pass_rate",
    "low",
    "high",
    "n",
    "sufficient",
    "successes",
    "failures",
    "timed_out",
    "runs",
    "mean_execution_seconds",
    "p50_execution_seconds",
    "mean_end_to_end_seconds",
    "p50_end_to_end_seconds",
]


def daily_series(
    df: Jobs,
    start: dt.date | dt.datetime,
    end: dt.date | dt.datetime,
    *,
    min_n: int = DEFAULT_MIN_N,
) -> pd.DataFrame:
    """One row per UTC day in [start, end): the pass rate (same function), counts, durations."""
    days = day_index(start, end)
    df = prepare(df)
    classified = df.latest
    # Tally outcomes by day once rather than filtering per day: O(N), not O(days x N).
    if classified.empty:
        tally = pd.DataFrame(index=days)
    else:
        tally = pd.crosstab(classified["placed_at"].dt.floor("D"), classified["outcome"])
    timed = _timed(df)
    timed = timed.assign(e2e=end_to_end_seconds(timed), day=timed["placed_at"].dt.floor("D"))
    durations = timed.groupby("day").agg(
        runs=("id", "size"),
        mean_execution_seconds=("execution_seconds", "mean"),
        p50_execution_seconds=("execution_seconds", "median"),
        mean_end_to_end_seconds=("e2e", "mean"),
        p50_end_to_end_seconds=("e2e", "median"),
    )
    return daily_frame(days, tally, durations, min_n=min_n)


def daily_frame(
    days: pd.Index,
    tally: pd.DataFrame,
    durations: pd.DataFrame,
    *,
    min_n: int = DEFAULT_MIN_N,
) -> pd.DataFrame:
    """The rows of `daily_series` from per-day outcome counts (columns `COUNTED`; superseded
    and excluded ones are not counted) and per-day durations (runs, means and medians), both
    indexed by `days`.

    `days` is the UTC midnights, or a MultiIndex whose last level is, such as (backend, day):
    its other levels become the first columns, so many series are built in one pass.
    """
    # Each day is a single cluster: its pass rate has the plain Wilson interval (of the
    # counted jobs, `OutcomeCounts.counted`), computed for every row at once.
    tally = tally.reindex(index=days, columns=list(COUNTED), fill_value=0).astype("int64")
    durations = durations.reindex(days)
    successes, failures, timed_out, cancelled = (tally[column].to_numpy() for column in COUNTED)
    counted = successes + failures + timed_out + cancelled
    low, high = wilson_intervals(successes, counted)
    out = pd.DataFrame(
        {
            "day": [day.date() for day in days.get_level_values(-1)],
            "pass_rate": np.where(counted > 0, successes / np.maximum(counted, 1), np.nan),
            "low": low,
            "high": high,
            "n": counted,
            "sufficient": (counted > 0) & (counted >= min_n),
            "successes": successes,
            "failures": counted - successes,
            "timed_out": timed_out,
        }
    )
    durations = durations.reset_index(drop=True).fillna({"runs": 0}).astype({"runs": "int64"})
    out = pd.concat([out, durations], axis=1)[DAILY_COLUMNS]
    if days.nlevels == 1:
        return out
    keys = days.to_frame(index=False).iloc[:, :-1]
    return pd.concat([keys, out], axis=1)
