"""A backend's gate metrics as of any moment, aggregated in SQL over the derived layer.

The derived layer's rows are what `stats.prepare` makes of all of a backend's attempts, so the
gate's rates are shares of counts read per UTC day (the day-clustered interval's unit), each
day split where a window starts: a few rows per backend and day instead of every logical job in
pandas. Of the logical-job and attempt counts, the whole days on which no window starts are the
daily rollups' (kept at write time, like the rows); only the days a window starts on, and
`as_of`'s own, are counted from the rows (the counts by last row, read only for backends whose
criteria name them, still from the rows of the span). Timing means and percentiles, which no
count gives, are taken over the window's timed attempts read as numbers; the trunk and nightly
series and the jobs that did not pass (what attribution judges) as their layer rows. As of an
earlier moment, the few logical jobs a later attempt changed are counted as `hud.stats` derives
them from the attempts placed before it (`_rederive_later`).
`tests/promotion/test_gate_counts.py` proves every figure equal to `hud.stats` over all the
backend's attempts as of the moment.

`SUPPORTED` names the metrics read this way: every one `hud.stats` defines. A backend with
exclusions is evaluated from its prepared jobs instead (`hud.reads.gate`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from django.db import connection
from django.db.models import (
    OuterRef,
    Q,
    Subquery,
)

from hud import gates, stats
from hud.models import DailyRollup, Downstream, Job, LogicalJob, sql
from hud.models.sql import any_sql, statement_rows
from hud.reads.rollups import OUTCOME_COLUMNS
from hud.reads.rows import float_groups, timed_attempts_sql, utc_day_sql
from hud.reads.selectors import FRAME_COLUMNS, FRAME_NAMES

# Shares of logical jobs, shares of attempts, and figures of timed attempts' durations.
_JOB_SHARES = {"job_pass_rate": stats.SUCCESS, "timeout_rate": stats.TIMED_OUT}
TIMINGS = {
    f"{base}_{stat}" for base in ("queue_seconds", "execution_seconds", "end_to_end_seconds")
    for stat in ("mean", "p50", "p95")
}  # fmt: skip
# The metrics counted by each logical job's last row (`BackendCounts.by_last_row`).
LAST_ROW_METRICS = frozenset({"first_attempt_pass_rate", "flake_rate"})
SUPPORTED = frozenset({
    *_JOB_SHARES, "first_attempt_pass_rate", "rerun_rate", "flake_rate", "flip_rate",
    "overrun_rate", "days_of_data", *TIMINGS,
})  # fmt: skip
# How many SHAs or PRs one read names (the as-of correction): a bound on its parameters,
# whatever the number written to since `as_of`.
IN_CHUNK = 1000
_V = TypeVar("_V", str, int, tuple[int, str, str])


def supports(criteria: Iterable[gates.Criterion]) -> bool:
    """Whether every metric `criteria` name is read here (caller metrics aside: the level
    start comes from the level history, the last result from `BackendCounts`, on-call
    responses from `oncall_responses`)."""
    named = {criterion.metric for criterion in criteria}
    return named - set(gates.CALLER_METRICS) <= SUPPORTED


@dataclass
class _Days:
    """Rows of counts per (UTC day, late): on a day a window starts, `late` rows are those at
    or after the start (every start has `as_of`'s time of day); on other days, all are not.

    Read as arrays (`_table`, kept until the next `add`): a backend page asks ~20 figures of
    them, and walking the buckets in Python for each cost it ~2 ms."""

    counts: dict[tuple[dt.date, bool], np.ndarray] = field(default_factory=dict)
    _table: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def add(self, day: dt.date, late: bool, values: Sequence[int]) -> None:
        row = np.asarray(values, dtype=np.int64)
        key = (day, bool(late))
        self.counts[key] = self.counts[key] + row if key in self.counts else row
        self._table = None

    def share(
        self, hits: int, units: int, start: dt.datetime, end: dt.datetime, min_n: int, note=""
    ) -> stats.Estimate:
        """`stats.day_clustered_proportion` of the units counted in column `units` with hits
        in column `hits`, over [start, end) and the spread's look-back."""
        days, rows = self._from(min(start, end - stats.SPREAD_LOOKBACK))
        # Per day of the look-back, in day order; days with no units are not days of it.
        day, at = np.unique(days, return_inverse=True)
        per_hits, per_units = np.zeros((2, day.size), dtype=np.int64)
        np.add.at(per_hits, at, rows[:, hits])
        np.add.at(per_units, at, rows[:, units])
        counted = per_units != 0
        return stats.clustered_proportion(
            self.total(hits, start),
            self.total(units, start),
            per_hits[counted],
            per_units[counted],
            min_n=min_n,
            note=note,
        )

    def total(self, column: int, start: dt.datetime) -> int:
        _, rows = self._from(start)
        return int(rows[:, column].sum())

    def days(self, column: int, start: dt.datetime) -> int:
        """Distinct days with a count in `column` from `start` on."""
        days, rows = self._from(start)
        return int(np.unique(days[rows[:, column] != 0]).size)

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(day ordinals, late flags, counts by row) of the buckets."""
        if self._table is None:
            keys = list(self.counts)
            # No buckets: a table as wide as the widest rows (`BackendCounts.jobs`').
            width = max((row.size for row in self.counts.values()), default=_COUNTED + 1)
            self._table = (
                np.array([day.toordinal() for day, _ in keys], dtype=np.int64),
                np.array([late for _, late in keys], dtype=bool),
                np.array(list(self.counts.values()), dtype=np.int64).reshape(len(keys), width),
            )
        return self._table

    def _mask(self, start: dt.datetime) -> np.ndarray:
        """Which buckets lie at or after `start`: its day's late ones (at or after its time of
        day, which every window start shares) and every later day's."""
        days, late, _ = self._arrays()
        first = start.astimezone(dt.UTC).date().toordinal()
        return (days > first) | ((days == first) & late)

    def _from(self, start: dt.datetime) -> tuple[np.ndarray, np.ndarray]:
        """The day ordinals and counts of the buckets at or after `start`."""
        days, _, rows = self._arrays()
        inside = self._mask(start)
        return days[inside], rows[inside]


# Logical-job columns: one count per outcome class, then completed and re-run completed jobs.
_OUTCOMES = (stats.SUCCESS, stats.FAILURE, stats.TIMED_OUT, stats.CANCELLED,
             stats.SUPERSEDED, stats.EXCLUDED)  # fmt: skip
_COMPLETED, _RERUN = len(_OUTCOMES), len(_OUTCOMES) + 1
_COUNTED = len(_OUTCOMES) + 2  # success + failure + timed_out + cancelled, summed in Python
# Columns by the last row's day (hud.stats' latest_placed_at): first attempts that passed and
# that counted, jobs a finished attempt failed or passed, flaky jobs.
_FIRST_SUCCESS, _FIRST_COUNTED, _FLAKE_ELIGIBLE, _FLAKY = 0, 1, 2, 3
# Attempt columns: completed attempts, timed ones with a known overrun flag, overruns.
_ATTEMPTS, _KNOWN, _OVERRUN = 0, 1, 2
# The trunk pushes' and nightlies' latest attempts the flip rate reads, and the layer's columns
# they come from.
_FLIP_COLUMNS = ["downstream", "event_type", "ref", "workflow_name", "job_name", "placed_at",
                 "id", "outcome"]  # fmt: skip
_FLIP_SOURCE = ["downstream_id", "event_type", "ref", "workflow_name", "job_name", "placed_at",
                "latest_job_id", "outcome"]  # fmt: skip
# A logical job within its backend, and the outcomes that do not pass (what attribution judges).
_KEY = ["event_type", "head_sha", "workflow_name", "job_name"]
_NOT_PASSING = (stats.FAILURE, stats.TIMED_OUT, stats.CANCELLED)
# The layer's columns `BackendCounts.count` reads of a logical job.
_LAYER = ["downstream_id", *_KEY, "ref", "latest_job_id", "latest_status", "outcome",
          "first_outcome", "attempts", "flake_eligible", "flaky", "placed_at",
          "last_placed_at"]  # fmt: skip
# Where `_LAYER`'s times are (`statement_rows` gives SQLite's naive).
_LAYER_TIMES = (_LAYER.index("placed_at"), _LAYER.index("last_placed_at"))


@dataclass
class BackendCounts:
    """What the gate reads of one backend as of `as_of`."""

    as_of: dt.datetime
    starts: Sequence[dt.datetime]  # where windows (and the spread's look-back) start
    jobs: _Days = field(default_factory=_Days)
    by_last_row: _Days = field(default_factory=_Days)
    attempts: _Days = field(default_factory=_Days)
    # Trunk and nightly latest attempts (`_FLIP_COLUMNS`) by logical job (`_KEY` but backend).
    series_points: dict[tuple, tuple] = field(default_factory=dict)
    # Logical jobs not passing since the first start: key (`_KEY`) → (placed_at, outcome).
    failing: dict[tuple, tuple[dt.datetime, str]] = field(default_factory=dict)
    # Timed attempts as arrays: the shortest window (days) each falls in, its queue and
    # execution seconds (NaN where unknown).
    timed: tuple[np.ndarray, np.ndarray, np.ndarray] = field(
        default_factory=lambda: (np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0))
    )
    last_result: dt.datetime | None = None
    # Whether `by_last_row` was read (`backend_counts`' `last_rows`).
    last_rows: bool = True

    def metric(self, name: str, start: dt.datetime, min_n: int) -> stats.Estimate:
        """`stats.compute_metric(name, prepared, start, as_of)` from the counts."""
        if name in LAST_ROW_METRICS and not self.last_rows:
            raise ValueError(f"{name}: the counts by last row were not read for this backend")
        end = self.as_of
        if name in _JOB_SHARES:
            note = ""
            if name == "job_pass_rate":
                note = _excluded_note(self.jobs, start)
            hits = _OUTCOMES.index(_JOB_SHARES[name])
            return self.jobs.share(hits, _COUNTED, start, end, min_n, note)
        if name == "rerun_rate":
            return self.jobs.share(_RERUN, _COMPLETED, start, end, min_n)
        if name == "first_attempt_pass_rate":
            return self.by_last_row.share(_FIRST_SUCCESS, _FIRST_COUNTED, start, end, min_n)
        if name == "flake_rate":
            return self.by_last_row.share(_FLAKY, _FLAKE_ELIGIBLE, start, end, min_n)
        if name == "flip_rate":
            points = pd.DataFrame.from_records(
                list(self.series_points.values()), columns=_FLIP_COLUMNS
            )
            points["placed_at"] = pd.to_datetime(points["placed_at"], utc=True)
            series = stats.flip_series_of_latest(points, start, end)
            return stats.flip_rate_of_series(series, min_n=min_n)
        if name == "overrun_rate":
            return self.attempts.share(_OVERRUN, _KNOWN, start, end, min_n)
        if name == "days_of_data":
            return stats.exact_count(self.days_of_data(start), "days")
        base, _, stat = name.rpartition("_")
        values = self._durations(base, start)
        if stat == "mean":
            return stats.mean_estimate(values, min_n=min_n)
        return stats.percentile_estimate(values, int(stat[1:]) / 100, min_n=min_n)

    def outcome_counts(self, start: dt.datetime) -> stats.OutcomeCounts:
        """`stats.outcome_counts(prepared, start, as_of)` from the counts."""
        return stats.OutcomeCounts.of_classes(
            {outcome: self.jobs.total(column, start) for column, outcome in enumerate(_OUTCOMES)}
        )

    def days_of_data(self, start: dt.datetime) -> int:
        """`stats.days_of_data(prepared, start, as_of)` from the counts."""
        return self.attempts.days(_ATTEMPTS, start)

    def _durations(self, base: str, start: dt.datetime) -> np.ndarray:
        days = round((self.as_of - start).total_seconds() / 86400)
        window, queue, execution = self.timed
        queue, execution = queue[window <= days], execution[window <= days]
        if base == "queue_seconds":
            return queue
        if base == "execution_seconds":
            return execution
        return execution + np.nan_to_num(queue, nan=0.0)  # NaN where execution is unknown

    def not_passing(self, start: dt.datetime) -> set[tuple]:
        """The logical jobs (`_KEY`) placed from `start` on that failed, timed out or were
        cancelled (not superseded)."""
        return {key for key, (placed_at, _) in self.failing.items() if placed_at >= start}

    def without(self, removed: Iterable[tuple[dt.datetime, str]]) -> BackendCounts:
        """These counts, for the pass rate, without the logical jobs (latest placed_at,
        outcome) given."""
        jobs = _Days(dict(self.jobs.counts))
        for placed_at, outcome in removed:
            jobs.add(*self._bucket(placed_at), -_job_row(outcome, False, 1))
        return dataclasses.replace(self, jobs=jobs)

    def _bucket(self, moment: dt.datetime) -> tuple[dt.date, bool]:
        """The (day, late) bucket of a row placed at `moment`, as `_per_day` tells it."""
        day = moment.astimezone(dt.UTC).date()
        late = any(start.astimezone(dt.UTC).date() == day and moment >= start
                   for start in self.starts)  # fmt: skip
        return day, late

    def count(self, job: Mapping[str, Any], sign: int) -> None:
        """Add (sign 1) or take out (-1) one logical job given as its layer columns."""
        first_row = min(self.starts)
        if first_row <= job["placed_at"] < self.as_of:
            completed = job["latest_status"] == Job.Status.COMPLETED
            row = _job_row(job["outcome"], completed, job["attempts"])
            self.jobs.add(*self._bucket(job["placed_at"]), sign * row)
            self.track(job, sign)
        if first_row <= job["last_placed_at"] < self.as_of:
            row = np.array(
                [job["first_outcome"] == stats.SUCCESS, job["first_outcome"] in stats.COUNTED,
                 job["flake_eligible"], job["flaky"]], dtype=np.int64,
            )  # fmt: skip
            self.by_last_row.add(*self._bucket(job["last_placed_at"]), sign * row)

    def track(self, job: Mapping[str, Any], sign: int) -> None:
        """Track (sign 1) or drop (-1) a logical job placed in the windows among the failing
        jobs and the series points, as its outcome and event say."""
        key = tuple(job[column] for column in _KEY)
        if job["outcome"] in _NOT_PASSING:
            if sign > 0:
                self.failing[key] = (job["placed_at"], job["outcome"])
            else:
                self.failing.pop(key, None)
        if _in_series(job["event_type"], job["ref"]):
            if sign > 0:
                self.series_points[key] = tuple(job[column] for column in _FLIP_SOURCE)
            else:
                self.series_points.pop(key, None)


def _job_row(outcome: str, completed: bool, attempts: int) -> np.ndarray:
    """One logical job's row of `BackendCounts.jobs`."""
    row = np.zeros(_COUNTED + 1, dtype=np.int64)
    row[_OUTCOMES.index(outcome)] = 1
    row[_COMPLETED] = completed
    row[_RERUN] = completed and attempts > 1
    row[_COUNTED] = outcome in stats.COUNTED
    return row


def _in_series(event_type: str, ref: str) -> bool:
    """Whether a job is a point of a trunk or nightly series (`stats.flip_series`)."""
    return (event_type == "push" and ref == stats.TRUNK_REF) or event_type == "nightly"


def _excluded_note(days: _Days, start: dt.datetime) -> str:
    superseded = days.total(_OUTCOMES.index(stats.SUPERSEDED), start)
    excluded = days.total(_OUTCOMES.index(stats.EXCLUDED), start)
    return f"{superseded} superseded cancels and {excluded} skipped/neutral excluded"


def backend_counts(
    ids: Sequence[int],
    windows: Iterable[int],
    timing_days: int,
    as_of: dt.datetime,
    *,
    flips: bool = False,
    last_rows: Collection[int] | None = None,
) -> dict[int, BackendCounts]:
    """The counts of each backend of `ids` over the windows (days before `as_of`), their
    spread's look-back, `timing_days` of timed attempts (0: none read), and with `flips` the
    trunk and nightly series. The counts by last row (`LAST_ROW_METRICS`) are read for the
    backends of `last_rows` only (None: all of them)."""
    starts = [as_of - dt.timedelta(days=days) for days in {*windows}]
    starts.append(as_of - stats.SPREAD_LOOKBACK)
    first = min(starts)
    out = {backend: BackendCounts(as_of, starts) for backend in ids}
    # Whole days between the first start's and `as_of`'s, on which no window starts, come from
    # the daily rollups; the others (split at a start, or cut at `as_of`) from the rows, read
    # as index ranges of those days (a filter on the span read all of it).
    whole, cut = _split_days(starts, as_of)
    _add_rollups(out, ids, whole)
    ranges = _day_ranges(cut, first, as_of)
    jobs = _per_day(_JOB_COUNTS, "placed_at", ids, ranges, starts)
    for backend, when, is_late, *counts in jobs:
        counted = sum(counts[_OUTCOMES.index(outcome)] for outcome in stats.COUNTED)
        out[backend].jobs.add(when, is_late, [*counts, counted])
    by_last = [backend for backend in ids if last_rows is None or backend in last_rows]
    for backend in ids:
        out[backend].last_rows = backend in by_last
    by_last_row = _per_day(_LAST_ROW_COUNTS, "last_placed_at", by_last, [(first, as_of)], starts)
    for backend, when, is_late, *counts in by_last_row:
        out[backend].by_last_row.add(when, is_late, counts)
    for row in _listed_rows(ids, first, as_of, flips):
        job = dict(zip(_LAYER, row, strict=True))
        out[job["downstream_id"]].track(job, 1)
    attempts = _per_day(_ATTEMPT_COUNTS, "placed_at", ids, ranges, starts)
    for backend, when, is_late, *counts in attempts:
        out[backend].attempts.add(when, is_late, counts)
    _rederive_later(out, ids, as_of)
    if timing_days:
        _read_durations(out, ids, sorted({*windows, timing_days}), timing_days, as_of)
    for backend, last_result in _last_results(ids, as_of):
        out[backend].last_result = last_result
    return out


# The statements below are written out for the reason `_per_day`'s are: compiled through the
# ORM, each cost more Python than the database spent answering it (~0.3 ms each, a backend
# page's figures and every gate evaluation read them).
_LISTED = (
    f"SELECT {', '.join(_LAYER)} FROM {LogicalJob._meta.db_table}"
    " WHERE {backends} AND placed_at >= %s AND placed_at < %s"
    f" AND (outcome IN ({', '.join(['%s'] * len(_NOT_PASSING))}){{series}})"
)
_SERIES = " OR (event_type = %s AND ref = %s) OR event_type = %s"


def _listed_rows(
    ids: Sequence[int], first: dt.datetime, as_of: dt.datetime, flips: bool
) -> list[tuple]:
    """The layer rows (`_LAYER`) of `ids` placed in [first, as_of) that do not pass, and with
    `flips` the trunk and nightly series' points (`_in_series`)."""
    backends, params = any_sql("downstream_id", ids)
    adapt = connection.ops.adapt_datetimefield_value
    params += [adapt(first), adapt(as_of), *_NOT_PASSING]
    if flips:
        params += ["push", stats.TRUNK_REF, "nightly"]
    statement = _LISTED.format(backends=backends, series=_SERIES if flips else "")
    return statement_rows(statement, params, utc=_LAYER_TIMES)


# Each backend's last completed attempt before `as_of`: one backward probe of its
# (downstream, placed_at) index each.
_LAST_RESULTS = (
    f"SELECT d.id, (SELECT placed_at FROM {Job._meta.db_table} WHERE downstream_id = d.id"
    " AND status = %s AND placed_at < %s ORDER BY placed_at DESC LIMIT 1)"
    f" FROM {Downstream._meta.db_table} d WHERE {{backends}}"
)


def _last_results(ids: Sequence[int], as_of: dt.datetime) -> list[tuple[int, dt.datetime | None]]:
    backends, params = any_sql("d.id", ids)
    adapt = connection.ops.adapt_datetimefield_value
    statement = _LAST_RESULTS.format(backends=backends)
    # The subquery's column keeps placed_at's declared type: SQLite's driver gives it naive.
    rows = statement_rows(statement, [Job.Status.COMPLETED, adapt(as_of), *params])
    return [(backend, sql.aware(last)) for backend, last in rows]


# The grouped counts `backend_counts` reads, written out: built through the ORM (a conditional
# Sum per class, the (day, late) CASE), compiling them cost more than the database spent
# answering. Each is (table, its counted columns as SQL, their parameters), grouped by backend,
# UTC day and whether a window start's day has the row at or after the start (`_after`).
_SUM_IF = "SUM(CASE WHEN {} THEN 1 ELSE 0 END)"
_TIMED_ROW = "status = %s AND NOT (conclusion = %s)"
_JOB_COUNTS = (
    LogicalJob._meta.db_table,
    ", ".join(
        [_SUM_IF.format("outcome = %s")] * len(_OUTCOMES)
        + [
            _SUM_IF.format("latest_status = %s"),
            _SUM_IF.format("latest_status = %s AND attempts > 1"),
        ]
    ),
    [*_OUTCOMES, Job.Status.COMPLETED, Job.Status.COMPLETED],
)
_LAST_ROW_COUNTS = (
    LogicalJob._meta.db_table,
    ", ".join(
        [
            _SUM_IF.format("first_outcome = %s"),
            _SUM_IF.format(f"first_outcome IN ({', '.join(['%s'] * len(stats.COUNTED))})"),
            _SUM_IF.format("flake_eligible"),
            _SUM_IF.format("flaky"),
        ]
    ),
    [stats.SUCCESS, *stats.COUNTED],
)
# Completed attempts (the rows read are those), timed ones with a known overrun flag, overruns:
# the sweeper's closes count as both (`stats.overrun_flags`).
_ATTEMPT_COUNTS = (
    Job._meta.db_table,
    ", ".join(
        [
            "COUNT(id)",
            _SUM_IF.format(
                f"{_TIMED_ROW} AND (closed_by_sweeper OR execution_seconds IS NOT NULL)"
            ),
            _SUM_IF.format(
                f"{_TIMED_ROW} AND (closed_by_sweeper"
                " OR execution_seconds + COALESCE(queue_seconds, 0.0) > %s)"
            ),
        ]
    ),
    [Job.Status.COMPLETED, Job.Conclusion.SKIPPED] * 2 + [stats.OVERRUN_SECONDS],
)


def _per_day(
    counts: tuple[str, str, list],
    column: str,
    ids: Sequence[int],
    ranges: Sequence[tuple[dt.datetime, dt.datetime]],
    starts: Sequence[dt.datetime],
) -> list[tuple]:
    """(backend, UTC day, late, *counts) of the rows of `ids` placed (by `column`) in `ranges`:
    `counts` is `_JOB_COUNTS`, `_LAST_ROW_COUNTS` or `_ATTEMPT_COUNTS`; attempts are the
    completed ones."""
    if not ids or not ranges:
        return []
    table, columns, params = counts
    adapt = connection.ops.adapt_datetimefield_value
    late = " OR ".join([f"({column} >= %s AND {column} < %s)"] * len(starts))
    late_params = [adapt(moment) for start in starts for moment in (start, _midnight_after(start))]
    backends, backend_params = any_sql("downstream_id", ids)
    within = " OR ".join([f"({column} >= %s AND {column} < %s)"] * len(ranges))
    where = f"{backends} AND ({within})"
    where_params = [*backend_params, *(adapt(moment) for bounds in ranges for moment in bounds)]
    if table == Job._meta.db_table:
        where, where_params = f"{where} AND status = %s", [*where_params, Job.Status.COMPLETED]
    statement = (
        f"SELECT downstream_id, {utc_day_sql(column)}, CASE WHEN {late} THEN 1 ELSE 0 END,"
        f" {columns} FROM {table} WHERE {where} GROUP BY 1, 2, 3"
    )
    rows = statement_rows(statement, [*late_params, *params, *where_params])
    return [(backend, _date(day), bool(late), *n) for backend, day, late, *n in rows]


def _date(value: dt.date | str) -> dt.date:
    """A date read by plain SQL: SQLite gives ISO text."""
    return value if isinstance(value, dt.date) else dt.date.fromisoformat(value)


def _split_days(
    starts: Sequence[dt.datetime], as_of: dt.datetime
) -> tuple[list[dt.date], list[dt.date]]:
    """The UTC days from the first start's to `as_of`'s: (whole ones, on which no start falls
    and which `as_of` does not cut; the others)."""
    first, last = min(starts).astimezone(dt.UTC).date(), as_of.astimezone(dt.UTC).date()
    cut = {start.astimezone(dt.UTC).date() for start in starts} | {last}
    days = [first + dt.timedelta(days=n) for n in range((last - first).days + 1)]
    return [day for day in days if day not in cut], sorted(cut)


def _day_ranges(
    days: Sequence[dt.date], low: dt.datetime, high: dt.datetime
) -> list[tuple[dt.datetime, dt.datetime]]:
    """[start, end) of each run of consecutive UTC days among `days`, within [low, high)."""
    return [
        (max(low, _midnight(first)), min(high, _midnight(last + dt.timedelta(days=1))))
        for first, last in _runs(days)
    ]


def _runs(days: Sequence[dt.date]) -> list[tuple[dt.date, dt.date]]:
    """Sorted `days` as (first, last) of each run of consecutive days."""
    runs: list[tuple[dt.date, dt.date]] = []
    for day in sorted(days):
        if runs and day - runs[-1][1] == dt.timedelta(days=1):
            runs[-1] = (runs[-1][0], day)
        else:
            runs.append((day, day))
    return runs


# The rollup columns `_add_rollups` sums: the logical jobs' (as `_JOB_COUNTS`, less the
# counted column) and the completed attempts' (as `_ATTEMPT_COUNTS`).
_ROLLUP_COLUMNS = [
    *(OUTCOME_COLUMNS[outcome] for outcome in _OUTCOMES),
    "completed_jobs", "rerun_jobs", "completed_attempts", "overrun_known", "overrun",
]  # fmt: skip
_ROLLUPS = (
    f"SELECT downstream_id, day, {', '.join(f'SUM({column})' for column in _ROLLUP_COLUMNS)}"
    f" FROM {DailyRollup._meta.db_table} WHERE {{backends}} AND ({{days}})"
    " GROUP BY downstream_id, day"
)


def _add_rollups(
    out: dict[int, BackendCounts], ids: Sequence[int], days: Sequence[dt.date]
) -> None:
    """Count `days` of each backend from its daily rollups (every event type): the layer's
    logical jobs by the day of their `placed_at` (the latest attempt's) and the completed
    attempts by their own, as the row reads count them (the rollups are kept with the rows in
    one transaction; tests/ingestion/test_derived.py proves them equal to a rebuild)."""
    runs = _runs(days)
    if not ids or not runs:
        return
    backends, params = any_sql("downstream_id", ids)
    spans = " OR ".join(["(day >= %s AND day <= %s)"] * len(runs))
    statement = _ROLLUPS.format(backends=backends, days=spans)
    jobs_end = len(_OUTCOMES) + 2
    for backend, day, *counts in statement_rows(statement, [*params, *itertools.chain(*runs)]):
        day = _date(day)
        counted = sum(counts[_OUTCOMES.index(outcome)] for outcome in stats.COUNTED)
        out[backend].jobs.add(day, False, [*counts[:jobs_end], counted])
        out[backend].attempts.add(day, False, counts[jobs_end:])


def _rederive_later(out: dict[int, BackendCounts], ids: Sequence[int], as_of: dt.datetime) -> None:
    """Count the logical jobs the layer does not describe as of `as_of` as they were then.

    Those with an attempt placed at or after `as_of` (re-runs, late legs), and the cancels it
    calls superseded in a PR written to since (supersession is only ever added, so a cancel the
    layer does not call superseded was not superseded at `as_of` either): their layer rows are
    taken out and they are re-derived by `hud.stats` from the attempts placed before `as_of`
    of their SHAs and of every PR those belong to. Attempts are counted from `Job` rows placed
    before `as_of` throughout, so nothing else changes."""
    later = set(
        Job.objects.filter(downstream_id__in=ids, placed_at__gte=as_of)
        .values_list("downstream_id", *_KEY, "pr_number")
        .distinct()
    )
    if not later:
        return
    stale = {row[:5] for row in later}
    written = {(row[0], row[5]) for row in later if row[5]}
    # A superseded latest attempt belongs to the row's PR, a superseded first one to its first.
    for prs in _chunks({pr for _, pr in written}):
        superseded = LogicalJob.objects.filter(
            Q(outcome=stats.SUPERSEDED, pr_number__in=prs)
            | Q(first_outcome=stats.SUPERSEDED, first_pr_number__in=prs),
            downstream_id__in={backend for backend, _ in written},
        ).values_list(
            "downstream_id", *_KEY, "outcome", "pr_number", "first_outcome", "first_pr_number"
        )
        stale |= {
            row[:5]
            for row in superseded
            if (row[5] == stats.SUPERSEDED and (row[0], row[6]) in written)
            or (row[7] == stats.SUPERSEDED and (row[0], row[8]) in written)
        }
    # A chunk of SHAs at a time (a catch-up as of long ago has many): each chunk's jobs are
    # derived from their own SHAs' and PRs' attempts, and counted for their own SHAs only.
    for shas in _chunks({key[2] for key in stale}):
        layer = LogicalJob.objects.filter(downstream_id__in=ids, head_sha__in=shas)
        for job in layer.values(*_LAYER):
            if _backend_key(job) in stale:
                out[job["downstream_id"]].count(job, -1)
        for job in _as_of_jobs(ids, shas, as_of):
            if job["head_sha"] in shas and _backend_key(job) in stale:
                out[job["downstream_id"]].count(job, 1)


def _backend_key(job: Mapping[str, Any]) -> tuple:
    """A logical job of layer columns as (backend id, *`_KEY`)."""
    return (job["downstream_id"], *(job[column] for column in _KEY))


def _chunks(values: set[_V]) -> Iterator[set[_V]]:
    """`values` in sets of at most `IN_CHUNK`, in order: a bound on a read's parameters."""
    ordered = sorted(values)
    for start in range(0, len(ordered), IN_CHUNK):
        yield set(ordered[start : start + IN_CHUNK])


def _as_of_jobs(ids: Sequence[int], shas: set[str], as_of: dt.datetime) -> list[dict[str, Any]]:
    """The logical jobs on `shas`, as `hud.stats` derives them from the attempts placed before
    `as_of` on those SHAs and on every PR they belong to, in the layer's columns."""
    before = Job.objects.filter(downstream_id__in=ids, placed_at__lt=as_of)
    prs = set(
        before.filter(head_sha__in=shas).exclude(pr_number=0).values_list("pr_number", flat=True)
    )
    columns = ["downstream_id", *FRAME_COLUMNS[2:]]
    rows = list(
        before.filter(Q(head_sha__in=shas) | Q(pr_number__in=prs)).values_list("id", *columns)
    )
    if not rows:
        return []
    prepared = stats.prepare(stats.rows_frame(rows, FRAME_NAMES))
    key = stats.LOGICAL_JOB_KEY
    first = prepared.first.set_index(key)["outcome"].rename("first_outcome")
    flakes = stats.flaky_jobs(prepared, pd.Timestamp.min.tz_localize("UTC"), as_of)
    flakes = flakes.set_index(key)[["has_failure", "has_success", "flaky"]]
    latest = prepared.latest.join(first, on=key).join(flakes, on=key)
    return [
        {
            **{column: record[column] for column in _KEY},
            "downstream_id": int(record["downstream"]),
            "ref": record["ref"],
            "latest_job_id": int(record["id"]),
            "latest_status": record["status"],
            "outcome": record["outcome"],
            "first_outcome": record["first_outcome"],
            "attempts": int(record["attempts"]),
            "flake_eligible": bool(record["has_failure"] or record["has_success"]),
            "flaky": bool(record["flaky"]),
            "placed_at": record["placed_at"].to_pydatetime(),
            "last_placed_at": record["latest_placed_at"].to_pydatetime(),
        }
        for record in latest.to_dict("records")
    ]


def _read_durations(
    out: dict[int, BackendCounts],
    ids: Sequence[int],
    windows: Sequence[int],
    days: int,
    as_of: dt.datetime,
) -> None:
    """The queue and execution seconds of the timed attempts of the last `days` days, each
    with the shortest of `windows` it falls in (no placed_at per row: reading it cost more
    than the rest), packed per backend and window on PostgreSQL (`rows.float_groups`)."""
    if not ids:
        return
    adapt = connection.ops.adapt_datetimefield_value
    shortest = " ".join(["WHEN placed_at >= %s THEN %s"] * len(windows))
    shortest_params = [value for w in windows for value in (adapt(as_of - dt.timedelta(days=w)), w)]
    source, params = timed_attempts_sql(ids, as_of - dt.timedelta(days=days), as_of)
    groups = float_groups(
        ["downstream_id", f"CASE {shortest} ELSE %s END"],
        ["queue_seconds", "execution_seconds"],
        source,
        params,
        [*shortest_params, days],
    )
    parts: dict[int, list[tuple[np.ndarray, ...]]] = defaultdict(list)
    for (backend, window), (queue, execution) in groups.items():
        parts[int(backend)].append((np.full(queue.size, window, dtype=np.int64), queue, execution))
    for backend, columns in parts.items():
        window, queue, execution = (np.concatenate(column) for column in zip(*columns, strict=True))
        out[backend].timed = (window, queue, execution)


def _midnight(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)


def _midnight_after(moment: dt.datetime) -> dt.datetime:
    return _midnight(moment.astimezone(dt.UTC).date() + dt.timedelta(days=1))


def oncall_responses(
    ids: Sequence[int], since: dt.datetime, as_of: dt.datetime
) -> dict[int, list[tuple[dt.datetime, float]]]:
    """Per backend, each failed completed PR attempt placed in [since, as_of) that a later
    completed PR attempt of its logical job (`stats.ATTEMPT_ORDER`) placed before `as_of`
    answered: (when it was placed, hours to the first such attempt, never negative), what
    `promotion.oncall_response_hours` pairs from all the attempts.

    The next attempt is one index probe per failure (a correlated subquery on the logical
    key), so nothing but the pairs is read: reading every attempt of the failed jobs and
    pairing them in pandas cost 150 ms for 50 backends at 1M jobs."""
    pr = Q(event_type="pull_request", status=Job.Status.COMPLETED, placed_at__lt=as_of)
    run, attempt = OuterRef("run_id"), OuterRef("run_attempt")
    after = (
        Q(run_id__gt=run)
        | Q(run_id=run, run_attempt__gt=attempt)
        | Q(run_id=run, run_attempt=attempt, id__gt=OuterRef("id"))
    )
    following = (
        Job.objects.filter(
            pr,
            after,
            **{column: OuterRef(column) for column in ("downstream_id", *_KEY)},
        )
        .order_by(*stats.ATTEMPT_ORDER)
        .values("placed_at")[:1]
    )
    failed = (
        Job.objects.filter(
            pr, downstream_id__in=ids, conclusion=Job.Conclusion.FAILURE, placed_at__gte=since
        )
        .annotate(following=Subquery(following))
        .values_list("downstream_id", "placed_at", "following")
    )
    out: dict[int, list[tuple[dt.datetime, float]]] = {backend: [] for backend in ids}
    for backend, placed_at, answered_at in failed:
        if answered_at is None:  # not answered yet (a filter would run the probe twice)
            continue
        hours = max((answered_at - placed_at).total_seconds(), 0.0) / 3600.0
        out[backend].append((placed_at, hours))
    return out
