"""Rates over a window: pass, timeout, first-attempt, re-run, flake and flip rates.

Each is a share of the window's logical jobs (by their latest attempt's `placed_at`) with a
day-clustered interval, except the flip rate (TestGrid's rule, on trunk and nightly series).
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections import defaultdict

import numpy as np
import pandas as pd

from hud.stats.frames import (
    LEG_SEVERITY,
    LOGICAL_JOB_KEY,
    Jobs,
    _in_window,
    _per_run,
    _runs_end,
    _runs_start,
    prepare,
)
from hud.stats.intervals import (
    DEFAULT_MIN_N,
    SPREAD_LOOKBACK,
    Estimate,
    clustered_proportion,
    day_clustered_proportion,
    proportion,
)
from hud.stats.outcomes import (
    COUNTED,
    FAILURE,
    SUCCESS,
    TIMED_OUT,
    OutcomeCounts,
    _counts,
)

TRUNK_REF = "refs/heads/main"
# A run of this many consecutive failures is a real breakage, not a flip (TestGrid's rule).
BREAKAGE_RUN = 3


def _window_latest(classified: pd.DataFrame, start: dt.datetime, end: dt.datetime) -> pd.DataFrame:
    return classified[_in_window(classified["placed_at"], start, end)]


def outcome_counts(df: Jobs, start: dt.datetime, end: dt.datetime) -> OutcomeCounts:
    """Classification counts of the logical jobs whose latest attempt is in the window."""
    return _counts(_window_latest(prepare(df).latest, start, end)["outcome"])


def _excluded_note(counts: OutcomeCounts) -> str:
    return f"{counts.superseded} superseded cancels and {counts.excluded} skipped/neutral excluded"


def _share_of_counted(
    jobs: pd.DataFrame,
    when: str,
    outcome: str,
    start: dt.datetime,
    end: dt.datetime,
    min_n: int,
    note: str = "",
) -> Estimate:
    """Share of `outcome` among the counted logical jobs placed (by `when`) in the window."""
    outcomes = jobs["outcome"].to_numpy()
    counted = np.isin(outcomes, COUNTED)
    return day_clustered_proportion(
        jobs[when].values[counted],  # datetime64 (to_numpy() would give Timestamps)
        outcomes[counted] == outcome,
        start,
        end,
        min_n=min_n,
        note=note,
    )


def pass_rate(
    df: Jobs, start: dt.datetime, end: dt.datetime, *, min_n: int = DEFAULT_MIN_N
) -> Estimate:
    """Job pass rate: successes / counted latest attempts of the window's logical jobs."""
    latest = prepare(df).latest
    note = _excluded_note(_counts(_window_latest(latest, start, end)["outcome"]))
    return _share_of_counted(latest, "placed_at", SUCCESS, start, end, min_n, note)


def pass_rate_of_counts(
    counts: OutcomeCounts,
    day_hits: np.ndarray,
    day_sizes: np.ndarray,
    *,
    min_n: int = DEFAULT_MIN_N,
) -> Estimate:
    """`pass_rate` from counts aggregated elsewhere (the derived layer's): the window's
    `counts` and, per UTC day of the spread's look-back, successes and counted jobs."""
    return clustered_proportion(
        counts.successes,
        counts.counted,
        day_hits,
        day_sizes,
        min_n=min_n,
        note=_excluded_note(counts),
    )


def timeout_rate(
    df: Jobs, start: dt.datetime, end: dt.datetime, *, min_n: int = DEFAULT_MIN_N
) -> Estimate:
    """Share of counted latest attempts that timed out (same denominator as the pass rate)."""
    return _share_of_counted(prepare(df).latest, "placed_at", TIMED_OUT, start, end, min_n)


def first_attempt_pass_rate(
    df: Jobs, start: dt.datetime, end: dt.datetime, *, min_n: int = DEFAULT_MIN_N
) -> Estimate:
    """Pass rate of each window logical job's first attempt (what a re-run would have hidden)."""
    return _share_of_counted(prepare(df).first, "latest_placed_at", SUCCESS, start, end, min_n)


def rerun_rate(
    df: Jobs, start: dt.datetime, end: dt.datetime, *, min_n: int = DEFAULT_MIN_N
) -> Estimate:
    """Share of the window's completed logical jobs that have more than one attempt."""
    latest = prepare(df).latest
    completed = latest[latest["status"] == "completed"]
    return day_clustered_proportion(
        completed["placed_at"], completed["attempts"] > 1, start, end, min_n=min_n
    )


# --------------------------------------------------------------------------- flakiness


def flaky_jobs(df: Jobs, start: dt.datetime, end: dt.datetime) -> pd.DataFrame:
    """Window logical jobs with `has_failure`, `has_success` and `flaky` (both) columns, in the
    prepared attempts' order (each logical job's attempts are consecutive rows there)."""
    attempts = prepare(df).attempts
    last_rows, has_failure, has_success = _flakiness(attempts, start, end)
    per_job = attempts[LOGICAL_JOB_KEY].take(last_rows).reset_index(drop=True)
    return per_job.assign(
        has_failure=has_failure,
        has_success=has_success,
        attempts=attempts["attempts"].to_numpy()[last_rows],
        placed_at=attempts["latest_placed_at"].array.take(last_rows),
        flaky=has_failure & has_success,
    )


def _flakiness(
    attempts: pd.DataFrame, start: dt.datetime, end: dt.datetime
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of the logical jobs placed in the window: the position of each one's last row among the
    prepared attempts, and whether a finished attempt of it failed and whether one passed. On
    the columns alone: a filtered copy of the attempts cost a backend page ~2 ms."""
    rows = np.flatnonzero(_in_window(attempts["latest_placed_at"], start, end).to_numpy())
    # Judged by attempt (the worst of its legs), so two legs of one attempt are not a flake.
    completed = ~attempts["attempt_open"].to_numpy()[rows]
    severity = attempts["attempt_severity"].to_numpy()[rows]
    has_failure = completed & (severity == LEG_SEVERITY[FAILURE])
    has_success = completed & (severity == LEG_SEVERITY[SUCCESS])
    starts = _runs_start(attempts[column].to_numpy()[rows] for column in LOGICAL_JOB_KEY)
    has_failure = _per_run(np.logical_or, has_failure, np.flatnonzero(starts))
    has_success = _per_run(np.logical_or, has_success, np.flatnonzero(starts))
    return rows[_runs_end(starts)], has_failure, has_success


def flake_rate(
    df: Jobs, start: dt.datetime, end: dt.datetime, *, min_n: int = DEFAULT_MIN_N
) -> Estimate:
    """Flaky logical jobs / logical jobs with at least one failed or successful attempt."""
    lookback_start = min(pd.Timestamp(start), pd.Timestamp(end) - SPREAD_LOOKBACK)
    attempts = prepare(df).attempts
    last_rows, has_failure, has_success = _flakiness(attempts, lookback_start, end)
    eligible = has_failure | has_success
    placed = attempts["latest_placed_at"].values[last_rows]  # datetime64, UTC
    return day_clustered_proportion(
        placed[eligible], (has_failure & has_success)[eligible], start, end, min_n=min_n
    )


def _flip_counts(outcomes: list[bool]) -> tuple[int, int]:
    """(flips, eligible transitions) of one pass(True)/fail(False) series, oldest first."""
    # Drop failures in runs of >= BREAKAGE_RUN: they are breakages. The points on either side
    # of a dropped run are passes, so dropping never merges two short failure runs.
    kept: list[bool] = []
    i = 0
    while i < len(outcomes):
        j = i
        while j < len(outcomes) and outcomes[j] == outcomes[i]:
            j += 1
        if outcomes[i] or j - i < BREAKAGE_RUN:
            kept.extend(outcomes[i:j])
        i = j
    flips = sum(1 for a, b in itertools.pairwise(kept) if a and not b)
    eligible = sum(1 for a in kept[:-1] if a)
    return flips, eligible


def flip_series(df: Jobs, start: dt.datetime, end: dt.datetime) -> pd.DataFrame:
    """Per (downstream, workflow, job) trunk+nightly series: points, flips, eligible."""
    return flip_series_of_latest(prepare(df).latest, start, end)


def flip_series_of_latest(
    classified: pd.DataFrame, start: dt.datetime, end: dt.datetime
) -> pd.DataFrame:
    """`flip_series` of latest attempts with their `outcome` (downstream, event_type, ref,
    workflow_name, job_name, placed_at and id columns besides)."""
    event = classified["event_type"].to_numpy()
    outcome = classified["outcome"].to_numpy()
    trunk = (event == "push") & (classified["ref"].to_numpy() == TRUNK_REF)
    points = np.flatnonzero(
        (trunk | (event == "nightly"))
        & np.isin(outcome, [SUCCESS, FAILURE, TIMED_OUT])
        & _in_window(classified["placed_at"], start, end).to_numpy()
    )
    # In time order (ids break ties), on the points' columns alone: filtering and sorting the
    # whole frame cost a backend page ~3 ms more.
    placed = classified["placed_at"].array.asi8[points]
    points = points[np.lexsort((classified["id"].to_numpy()[points], placed))]
    # Each series in time order, gathered from plain lists: a groupby's loop built a frame per
    # series, ~0.3 ms each (docs/performance.md).
    series: dict[tuple[str, str, str], list[bool]] = defaultdict(list)
    columns = [
        classified[c].to_numpy()[points].tolist()
        for c in ("downstream", "workflow_name", "job_name")
    ]
    passes = (outcome[points] == SUCCESS).tolist()
    for *key, passed in zip(*columns, passes, strict=True):
        series[tuple(key)].append(passed)
    records = [(*key, len(kept), *_flip_counts(kept)) for key, kept in sorted(series.items())]
    return pd.DataFrame(
        records,
        columns=["downstream", "workflow_name", "job_name", "points", "flips", "eligible"],
    )


def flip_rate(
    df: Jobs, start: dt.datetime, end: dt.datetime, *, min_n: int = DEFAULT_MIN_N
) -> Estimate:
    """TestGrid-style flip rate: pass→fail flips / transitions out of a pass, breakages ignored."""
    return flip_rate_of_series(flip_series(df, start, end), min_n=min_n)


def flip_rate_of_series(series: pd.DataFrame, *, min_n: int = DEFAULT_MIN_N) -> Estimate:
    """`flip_rate` of `flip_series`' rows."""
    return proportion(
        int(series["flips"].sum()),
        int(series["eligible"].sum()),
        min_n=min_n,
        note="trunk pushes and nightly; failure runs of >= 3 ignored",
    )
