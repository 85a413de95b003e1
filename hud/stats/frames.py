"""Jobs frames: the one input of every figure, cleaned, ordered and classified once.

A *jobs frame* has one row per attempt (`JOB_COLUMNS`); a *logical job* is `LOGICAL_JOB_KEY`,
its attempts ordered by `ATTEMPT_ORDER`; rows sharing (run_id, run_attempt) are the legs of one
attempt. `prepare` turns a frame into `PreparedJobs` (rows, attempts, latest and first attempt
per logical job, with their outcome class), which every metric accepts instead of a frame.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from hud.stats.outcomes import classify

# Copy-on-write, pandas 3's default, for the process: selecting columns, `assign`, `drop` and
# `reset_index` then share the frame's arrays instead of copying every block, which a backend
# page did a few hundred times over the same logical jobs (the demo's busiest page, 112.5 →
# 103.5 ms). Nothing here writes into a frame it was given, so no result depends on it.
pd.set_option("mode.copy_on_write", True)

JOB_COLUMNS: dict[str, str] = {
    "id": "int64",
    "downstream": "object",
    "event_type": "object",
    "pr_number": "int64",
    "head_sha": "object",
    "workflow_name": "object",
    "job_name": "object",
    "run_id": "int64",
    "run_attempt": "int64",
    "status": "object",
    "conclusion": "object",
    "placed_at": "datetime64[ns, UTC]",
    "in_progress_received_at": "datetime64[ns, UTC]",
    "queue_seconds": "float64",
    "execution_seconds": "float64",
    "closed_by_sweeper": "bool",
    "ref": "object",
}
LOGICAL_JOB_KEY = ["downstream", "event_type", "head_sha", "workflow_name", "job_name"]
ATTEMPT_ORDER = ["run_id", "run_attempt", "id"]
# Rows of one logical job sharing run_id and run_attempt are the legs of one attempt.
ATTEMPT_KEY = [*LOGICAL_JOB_KEY, "run_id", "run_attempt"]
# Worst first when an attempt's legs disagree; skipped, neutral and unfinished rank below all.
LEG_SEVERITY = {"failure": 4, "timed_out": 3, "cancelled": 2, "success": 1}

_DEFAULTS: dict[str, Any] = {
    "event_type": "pull_request",
    "pr_number": 0,
    "head_sha": "",
    "workflow_name": "",
    "job_name": "",
    "run_id": 0,
    "run_attempt": 1,
    "status": "completed",
    "conclusion": "",
    "in_progress_received_at": pd.NaT,
    "queue_seconds": np.nan,
    "execution_seconds": np.nan,
    "closed_by_sweeper": False,
    "ref": "",
}


def empty_jobs_frame() -> pd.DataFrame:
    """An empty jobs frame with the contract's columns and dtypes."""
    return pd.DataFrame({col: pd.Series(dtype=dtype) for col, dtype in JOB_COLUMNS.items()})


def jobs_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Build a jobs frame from dicts, filling optional columns and coercing the dtypes."""
    records = [{**_DEFAULTS, **row} for row in rows]
    if not records:
        return empty_jobs_frame()
    frame = pd.DataFrame.from_records(records)
    missing = [c for c in JOB_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"jobs frame is missing required columns: {missing}")
    return coerce_jobs_frame(frame)


def coerce_jobs_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Return `df` with the contract's columns in order and dtypes (extra columns dropped)."""
    columns = {}
    for col, dtype in JOB_COLUMNS.items():
        series = df[col]
        if dtype != "object" and str(series.dtype) == dtype:
            pass  # already typed (a database read's ints, floats, booleans and times often are)
        elif dtype.startswith("datetime"):
            # No cache: deciding whether to cache turns up to 10,000 values into Timestamps,
            # which cost a backend page more than the conversion itself.
            series = pd.to_datetime(series, utc=True, cache=False)
        elif dtype == "object":
            series = series.fillna("").astype(str)
        elif dtype == "bool":
            series = series.fillna(False).astype(bool)
        else:
            series = series.astype(dtype)
        columns[col] = series.reset_index(drop=True)
    # One frame of all columns at once: inserting them one by one cost twice the conversions.
    return pd.DataFrame(columns)


def rows_frame(
    rows: Sequence[Sequence[Any]], columns: Sequence[str], **constants: Any
) -> pd.DataFrame:
    """A jobs frame of database rows: tuples in `columns` order, `constants` filling whole
    columns (a backend's name). The contract's columns come first, typed as
    `coerce_jobs_frame` types them; other columns follow, typed as pandas infers them.

    Typed a column at a time from the rows, not through a frame of them: building a frame of
    a backend page's 1,262 layer rows and coercing it took 5.6 ms, this 1.7 ms.
    """
    missing = [c for c in JOB_COLUMNS if c not in columns and c not in constants]
    if missing:
        raise ValueError(f"jobs frame is missing required columns: {missing}")
    count = len(rows)
    values = dict(zip(columns, zip(*rows, strict=True), strict=True)) if rows else {}
    values |= {column: (value,) * count for column, value in constants.items()}
    out: dict[str, Any] = {}
    for column, dtype in JOB_COLUMNS.items():
        given = values.get(column, ())
        if dtype == "object":
            array = np.array(given, dtype=object)
            if None in given:
                array[array == None] = ""  # noqa: E711 (element-wise)
            if pd.api.types.infer_dtype(array) not in ("string", "empty"):  # ids, say
                array = np.array([str(value) for value in array], dtype=object)
            out[column] = array
        elif dtype.startswith("datetime"):
            times = pd.Series(given, dtype=object)
            out[column] = pd.to_datetime(times, utc=True, cache=False).array
        else:  # None is NaN as a float, False as a bool
            out[column] = np.array(given, dtype=dtype)
    for column in columns:
        if column not in out:
            out[column] = pd.Series(values.get(column, ())).array
    return pd.DataFrame(out)


def _clean(df: pd.DataFrame) -> pd.DataFrame:
    # Duplicated deliveries of the same row (same id) count once; sorting by id makes every
    # later step independent of the caller's row order.
    return df.drop_duplicates(subset="id", keep="last").sort_values("id", kind="mergesort")


def as_of(df: pd.DataFrame, moment: dt.datetime) -> pd.DataFrame:
    """The jobs frame as it was known at `moment`: rows placed before it."""
    if isinstance(df, PreparedJobs):
        df = df.rows
    return df[df["placed_at"] < pd.Timestamp(moment)]


def _in_window(times: pd.Series, start: dt.datetime, end: dt.datetime) -> pd.Series:
    return (times >= pd.Timestamp(start)) & (times < pd.Timestamp(end))


def _runs_start(columns: Iterable[np.ndarray]) -> np.ndarray:
    """Where a run of rows equal in every one of `columns` (sorted so) begins; the first row
    always does."""
    columns = list(columns)
    starts = np.zeros(len(columns[0]), dtype=bool)
    starts[:1] = True
    for values in columns:
        starts[1:] |= values[1:] != values[:-1]
    return starts


def _runs_end(starts: np.ndarray) -> np.ndarray:
    """Where each run ends, from where runs start: before the next start, and the last row."""
    ends = np.zeros_like(starts)
    ends[:-1] = starts[1:]
    ends[-1:] = True
    return ends


def _per_run(ufunc: np.ufunc, values: np.ndarray, first_rows: np.ndarray) -> np.ndarray:
    """`ufunc` reduced over each run of `values` (runs begin at the row numbers `first_rows`),
    one value a run; none for no rows, where `reduceat` would fail."""
    return ufunc.reduceat(values, first_rows) if len(values) else values[:0]


def _with_attempt_info(rows: pd.DataFrame) -> pd.DataFrame:
    """Clean rows by logical job then attempt order, with what each row's attempt amounts to.

    Rows of one logical job with the same (run_id, run_attempt) are legs of one attempt (CRCR.md
    "Legs vs attempts"): they share `attempt_index`; `attempts` counts attempts, not legs;
    `attempt_severity` is the worst leg's `LEG_SEVERITY` and `attempt_open` whether any leg of
    the attempt is still in progress.

    Sorted so, each logical job and each attempt is a run of consecutive rows: they are numbered
    and reduced with numpy (grouping by five text columns was most of a gate's preparation).
    """
    rows = rows.sort_values([*LOGICAL_JOB_KEY, *ATTEMPT_ORDER], kind="mergesort")
    job_starts = _runs_start(rows[column].to_numpy() for column in LOGICAL_JOB_KEY)
    # ATTEMPT_KEY is the logical job and (run_id, run_attempt).
    attempt_starts = job_starts | _runs_start(rows[c].to_numpy() for c in ("run_id", "run_attempt"))
    job = np.cumsum(job_starts) - 1  # per row: its logical job's number
    attempt = np.cumsum(attempt_starts) - 1  # per row: its attempt's number, over all jobs
    first_attempt = attempt[job_starts]  # per job
    last_row = np.flatnonzero(_runs_end(job_starts))  # per job
    attempt_rows = np.flatnonzero(attempt_starts)
    severity = rows["conclusion"].map(LEG_SEVERITY).fillna(0).astype(int).to_numpy()
    still_open = (rows["status"] != "completed").to_numpy()
    severity = _per_run(np.maximum, severity, attempt_rows)[attempt]
    still_open = _per_run(np.logical_or, still_open, attempt_rows)[attempt]
    return rows.assign(
        attempt_index=attempt - first_attempt[job],
        attempts=(attempt[last_row] - first_attempt + 1)[job],
        latest_placed_at=rows["placed_at"].array.take(last_row[job]),
        attempt_severity=severity,
        attempt_open=still_open,
    )


def _attempt_outcome(legs: pd.DataFrame) -> pd.DataFrame:
    """One row per logical job from the legs of one of its attempts: the worst leg stands for it.

    An attempt's conclusion is the worst of its legs (failure > timed_out > cancelled > success),
    and it is complete only when every leg that reported is, so a passing leg that reports last
    never hides a failing one. `legs` come in `_with_attempt_info`'s order, and so do the rows
    returned.
    """
    job = np.cumsum(_runs_start(legs[column].to_numpy() for column in LOGICAL_JOB_KEY)) - 1
    severity = legs["conclusion"].map(LEG_SEVERITY).fillna(0).to_numpy()
    # By job, then severity, then id: each job's last row is its worst leg (the latest id).
    order = np.lexsort((legs["id"].to_numpy(), severity, job))
    worst = legs.iloc[order[_runs_end(_runs_start([job[order]]))]]
    still_open = worst["attempt_open"].to_numpy()
    return worst.assign(
        status=np.where(still_open, "in_progress", worst["status"]),
        conclusion=np.where(still_open, "", worst["conclusion"]),
    )


@dataclass(frozen=True, eq=False)
class PreparedJobs:
    """A jobs frame cleaned, ordered and classified once; every metric accepts it instead."""

    rows: pd.DataFrame  # de-duplicated by id, sorted by id
    # Each logical job's attempt rows consecutive, in attempt order (`combine_prepared` keeps
    # that: its parts share no logical job), with attempt_index, attempts and the attempt's legs.
    attempts: pd.DataFrame
    latest: pd.DataFrame  # latest attempt per logical job, with `outcome`
    first: pd.DataFrame  # first attempt per logical job, with `outcome` and latest_placed_at

    @functools.cached_property
    def timed(self) -> pd.DataFrame:
        """The completed, not skipped attempt rows: the population of timing figures (a skipped
        job never used a runner; its ~0 s would drag the averages down). Kept once taken: a
        backend page's summary reads it twice and its daily series once."""
        rows = self.rows
        return rows[(rows["status"] == "completed") & (rows["conclusion"] != "skipped")]


Jobs = pd.DataFrame | PreparedJobs


def prepare(df: Jobs) -> PreparedJobs:
    """Clean, order and classify a jobs frame once, to compute many metrics from it."""
    if isinstance(df, PreparedJobs):
        return df
    rows = _clean(df)
    attempts = _with_attempt_info(rows)
    latest = _attempt_outcome(attempts[attempts["attempt_index"] == attempts["attempts"] - 1])
    first = _attempt_outcome(attempts[attempts["attempt_index"] == 0])
    attempt_columns = ["attempt_index", "attempt_severity", "attempt_open"]
    latest = latest.drop(columns=attempt_columns).reset_index(drop=True)
    first = first.drop(columns=attempt_columns).reset_index(drop=True)
    return PreparedJobs(
        rows=rows,
        attempts=attempts,
        latest=latest.assign(outcome=classify(latest, rows)),
        first=first.assign(outcome=classify(first, rows)),
    )


def prepare_single_rows(rows: pd.DataFrame, outcomes: Iterable[str]) -> PreparedJobs:
    """What `prepare` makes of logical jobs that are one row each (one attempt of one leg)
    whose outcome classes are known already (the derived layer's), without grouping.

    `rows` is a typed jobs frame (`rows_frame`, `coerce_jobs_frame`); its other columns are
    left out. Such a row is its job's first and latest attempt; its attempt's severity is its
    own.
    """
    rows = rows[list(JOB_COLUMNS)].reset_index(drop=True)
    latest = rows.assign(attempts=1, latest_placed_at=rows["placed_at"])
    attempts = latest.assign(
        attempt_index=0,
        attempt_severity=rows["conclusion"].map(LEG_SEVERITY).fillna(0).astype(int),
        attempt_open=rows["status"] != "completed",
    )
    latest = latest.assign(outcome=pd.Series(list(outcomes), index=rows.index, dtype=object))
    return PreparedJobs(rows=rows, attempts=attempts, latest=latest, first=latest)


def combine_prepared(parts: Iterable[PreparedJobs]) -> PreparedJobs:
    """One PreparedJobs of parts that share no logical job and whose supersession universes
    were each complete (every row of a PR a part classifies is in that part)."""
    parts = list(parts)

    def joined(field: str) -> pd.DataFrame:
        frames = [getattr(part, field) for part in parts]
        return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]

    return PreparedJobs(
        rows=joined("rows").sort_values("id", kind="mergesort"),
        attempts=joined("attempts"),
        latest=joined("latest"),
        first=joined("first"),
    )


def latest_attempts(df: Jobs) -> pd.DataFrame:
    """One row per logical job: its latest attempt, with `attempts` and `outcome` columns."""
    return prepare(df).latest


def first_attempts(df: Jobs) -> pd.DataFrame:
    """One row per logical job: its first attempt (lowest run_id, run_attempt, id)."""
    return prepare(df).first


def classified_latest(df: Jobs) -> pd.DataFrame:
    """Latest attempt per logical job with an `outcome` column (see `classify`)."""
    return prepare(df).latest
