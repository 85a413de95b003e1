"""Metrics by name (`METRIC_NAMES`, what the gate policy names) and one backend's bundle."""

from __future__ import annotations

import datetime as dt
from typing import Any

from hud.stats.frames import Jobs, prepare
from hud.stats.health import DEFAULT_STUCK_AFTER, days_of_data, last_result_at, liveness, stuck_jobs
from hud.stats.intervals import (
    DEFAULT_MIN_N,
    Estimate,
    exact_count,
    mean_estimate,
    percentile_estimate,
)
from hud.stats.rates import (
    first_attempt_pass_rate,
    flake_rate,
    flip_rate,
    outcome_counts,
    pass_rate,
    rerun_rate,
    timeout_rate,
)
from hud.stats.timing import end_to_end_seconds, overrun_rate, timed_attempts, timing_estimates

METRIC_NAMES = (
    "job_pass_rate",
    "first_attempt_pass_rate",
    "rerun_rate",
    "timeout_rate",
    "flake_rate",
    "flip_rate",
    "overrun_rate",
    "queue_seconds_mean",
    "queue_seconds_p50",
    "queue_seconds_p95",
    "execution_seconds_mean",
    "execution_seconds_p50",
    "execution_seconds_p95",
    "end_to_end_seconds_mean",
    "end_to_end_seconds_p50",
    "end_to_end_seconds_p95",
    "days_of_data",
)


def compute_metric(
    name: str,
    df: Jobs,
    start: dt.datetime,
    end: dt.datetime,
    *,
    min_n: int = DEFAULT_MIN_N,
) -> Estimate:
    """Compute one named metric (see `METRIC_NAMES`) over [start, end)."""
    proportions = {
        "job_pass_rate": pass_rate,
        "first_attempt_pass_rate": first_attempt_pass_rate,
        "rerun_rate": rerun_rate,
        "timeout_rate": timeout_rate,
        "flake_rate": flake_rate,
        "flip_rate": flip_rate,
        "overrun_rate": overrun_rate,
    }
    if name in proportions:
        return proportions[name](df, start, end, min_n=min_n)
    if name == "days_of_data":
        return exact_count(days_of_data(df, start, end), "days")
    if name.startswith(("queue_seconds_", "execution_seconds_", "end_to_end_seconds_")):
        rows = timed_attempts(df, start, end)
        base, _, stat = name.rpartition("_")
        values = end_to_end_seconds(rows) if base == "end_to_end_seconds" else rows[base]
        if stat == "mean":
            return mean_estimate(values, min_n=min_n)
        if stat in ("p50", "p95"):
            return percentile_estimate(values, int(stat[1:]) / 100, min_n=min_n)
    raise KeyError(f"unknown metric {name!r}; known: {', '.join(METRIC_NAMES)}")


def backend_summary(
    df: Jobs,
    window_start: dt.datetime,
    window_end: dt.datetime,
    now: dt.datetime,
    *,
    min_n: int = DEFAULT_MIN_N,
    stuck_after: dt.timedelta = DEFAULT_STUCK_AFTER,
    dispatched: int | None = None,
    answered: int | None = None,
) -> dict[str, Any]:
    """Every metric for one backend's jobs frame over one window, keyed by metric name."""
    df = prepare(df)
    counts = outcome_counts(df, window_start, window_end)
    summary: dict[str, Any] = {
        "job_pass_rate": pass_rate(df, window_start, window_end, min_n=min_n),
        "timeout_rate": timeout_rate(df, window_start, window_end, min_n=min_n),
        "first_attempt_pass_rate": first_attempt_pass_rate(
            df, window_start, window_end, min_n=min_n
        ),
        "rerun_rate": rerun_rate(df, window_start, window_end, min_n=min_n),
        "flake_rate": flake_rate(df, window_start, window_end, min_n=min_n),
        "flip_rate": flip_rate(df, window_start, window_end, min_n=min_n),
        "overrun_rate": overrun_rate(df, window_start, window_end, min_n=min_n),
        **timing_estimates(df, window_start, window_end, min_n=min_n),
        "days_of_data": days_of_data(df, window_start, window_end),
        "counts": counts,
        "stuck_jobs": len(stuck_jobs(df, now, stuck_after)),
        "last_result_at": last_result_at(df),
    }
    last = summary["last_result_at"]
    summary["seconds_since_last_result"] = None if last is None else (now - last).total_seconds()
    if dispatched is not None and answered is not None:
        summary["liveness"] = liveness(answered, dispatched, last, now, min_n=min_n)
    return summary
