"""A window's figures for many backends at once, aggregated in SQL over the derived layer.

`/crcr` and `/api/v1/backends/` show, per backend, the pass rate with its day-clustered
interval, the outcome counts, the execution mean and median, stuck attempts, the last result
and the usual gap between results. Computing them from a jobs frame meant classifying every
attempt of the window per request; here each figure is a handful of grouped queries whose
result size depends on the number of backends and days, not on the attempts behind them:

- counts per backend, UTC day and outcome class from `LogicalJob` (outcome already derived at
  write time), split at the window's start, over the spread's look-back
  (`stats.SPREAD_LOOKBACK`), fed to `stats.pass_rate_of_counts`;
- execution seconds of the window's timed attempts (the exact population of
  `stats.timed_attempts`, one array per backend on PostgreSQL: the mean and median intervals
  need them all);
- the last completed attempt and the usual gap between the `RECENT_RESULTS` latest ones
  (bounded whatever the window; gaps and percentile in SQL on PostgreSQL), and the stuck
  count, one aggregate each.

`tests/pages/test_window_figures.py` checks these equal `hud.stats` on the attempts of the
same random histories.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from django.db import connection
from django.db.models import Case, Count, F, Q, Sum, Value, When, Window
from django.db.models.functions import RowNumber

from hud import stats
from hud.models import DailyRollup, Job, LogicalJob
from hud.models.sql import any_sql, statement_rows
from hud.reads.rows import STUCK_SQL, UtcDate, float_groups, stuck_params, timed_attempts_sql
from hud.reads.selectors import FRAME_MARGIN

# The `OutcomeCounts` field of each outcome class.
_COUNT_FIELDS = {
    stats.SUCCESS: "successes",
    stats.FAILURE: "failures",
    stats.TIMED_OUT: "timed_out",
    stats.CANCELLED: "cancelled",
    stats.SUPERSEDED: "superseded",
    stats.EXCLUDED: "excluded",
}


@dataclass(frozen=True)
class WindowFigures:
    """What `/crcr` shows for one backend over one window."""

    pass_rate: stats.Estimate
    counts: stats.OutcomeCounts
    execution_mean: stats.Estimate
    execution_p50: stats.Estimate
    stuck: int
    last_result_at: dt.datetime | None
    usual_gap: float | None  # seconds (`stats.usual_gap_seconds`)


def window_figures(
    downstream_ids: list[int], start: dt.datetime, end: dt.datetime, now: dt.datetime
) -> dict[int, WindowFigures]:
    """The figures of each backend over [start, end), in four queries whatever their count."""
    if not downstream_ids:
        return {}
    counts, spreads = _outcome_counts(downstream_ids, start, end)
    executions = _executions(downstream_ids, start, end)
    recent = _recent_results(downstream_ids, end)
    stuck = stuck_counts(downstream_ids, start, end, now)
    return {
        downstream_id: _figures(
            counts.get(downstream_id, {}),
            spreads.get(downstream_id, ([], [])),
            executions.get(downstream_id, np.empty(0)),
            stuck.get(downstream_id, 0),
            *recent.get(downstream_id, (None, None)),
        )
        for downstream_id in downstream_ids
    }


def empty_figures() -> WindowFigures:
    """The figures of a backend with no results in the window (or not shown on the HUD)."""
    return _figures({}, ([], []), np.empty(0), 0, None, None)


def _figures(
    counts: dict[str, int],
    spread: tuple[list[int], list[int]],
    executions: np.ndarray,
    stuck: int,
    last_result_at: dt.datetime | None,
    usual_gap: float | None,
) -> WindowFigures:
    tally = stats.OutcomeCounts(**counts)
    day_hits, day_sizes = spread
    return WindowFigures(
        pass_rate=stats.pass_rate_of_counts(tally, np.asarray(day_hits), np.asarray(day_sizes)),
        counts=tally,
        execution_mean=stats.mean_estimate(executions),
        execution_p50=stats.percentile_estimate(executions, 0.5),
        stuck=stuck,
        last_result_at=last_result_at,
        usual_gap=usual_gap,
    )


def _outcome_counts(
    downstream_ids: list[int], start: dt.datetime, end: dt.datetime
) -> tuple[dict[int, dict[str, int]], dict[int, tuple[list[int], list[int]]]]:
    """Per backend: the window's counts by class, and the look-back's counted jobs and
    successes per UTC day (the spread `stats.day_clustered_proportion` estimates)."""
    lookback = min(start, end - stats.SPREAD_LOOKBACK)
    # Whole UTC days come from the daily rollups, except the day the window's start cuts;
    # the cut day and the look-back's partial ends come from the logical jobs.
    whole = _whole_days(lookback, end)
    cut = start.date()
    partial = LogicalJob.objects.filter(
        downstream_id__in=downstream_ids, placed_at__gte=lookback, placed_at__lt=end
    )
    if whole:
        partial = partial.exclude(_day_range(*whole) & ~_day_range(cut, cut))
    from_jobs = (
        partial.annotate(
            day=UtcDate("placed_at"),
            in_window=Case(When(placed_at__gte=start, then=Value(1)), default=Value(0)),
        )
        .values_list("downstream_id", "day", "in_window", "outcome")
        .annotate(n=Count("id"))
        .order_by()
    )
    from_rollups = _rollup_rows(downstream_ids, whole, cut, start) if whole else []
    rows = sorted([*from_jobs, *from_rollups], key=lambda row: row[:2])
    counts: dict[int, dict[str, int]] = {}
    per_day: dict[int, dict[dt.date, list[int]]] = defaultdict(dict)
    for downstream_id, day, in_window, outcome, n in rows:
        if in_window:
            tally = counts.setdefault(downstream_id, dict.fromkeys(_COUNT_FIELDS.values(), 0))
            tally[_COUNT_FIELDS[outcome]] += n
        if outcome in stats.COUNTED:
            hits_and_size = per_day[downstream_id].setdefault(day, [0, 0])
            hits_and_size[0] += n if outcome == stats.SUCCESS else 0
            hits_and_size[1] += n
    spreads = {
        downstream_id: ([hits for hits, _ in days.values()], [size for _, size in days.values()])
        for downstream_id, days in per_day.items()
    }
    return counts, spreads


_DAY = dt.timedelta(days=1)
# The usual gap between results is of a backend's latest results, whatever window the reader
# picked: staleness is about now, and the work stays bounded.
RECENT_RESULTS = 200


def _midnight(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)


def _whole_days(lookback: dt.datetime, end: dt.datetime) -> tuple[dt.date, dt.date] | None:
    """The first and last UTC day wholly inside [lookback, end), None when there is none."""
    first = lookback.date() if lookback == _midnight(lookback.date()) else lookback.date() + _DAY
    last = end.date() - _DAY
    return (first, last) if first <= last else None


def _day_range(first: dt.date, last: dt.date) -> Q:
    return Q(placed_at__gte=_midnight(first), placed_at__lt=_midnight(last + _DAY))


def _rollup_rows(
    downstream_ids: list[int],
    whole: tuple[dt.date, dt.date],
    cut: dt.date,
    start: dt.datetime,
) -> list[tuple[int, dt.date, int, str, int]]:
    """Rows shaped as the logical-job counts (backend, day, in window, class, n) from the
    daily rollups of the whole days but the one the window's start cuts."""
    sums = (
        DailyRollup.objects.filter(
            downstream_id__in=downstream_ids, day__gte=whole[0], day__lte=whole[1]
        )
        .exclude(day=cut)
        .values_list("downstream_id", "day")
        .annotate(*(Sum(outcome) for outcome in _COUNT_FIELDS))
        .order_by()
    )
    return [
        (downstream_id, day, int(_midnight(day) >= start), outcome, n)
        for downstream_id, day, *tallies in sums
        for outcome, n in zip(_COUNT_FIELDS, tallies, strict=True)
        if n
    ]


def _executions(
    downstream_ids: list[int], start: dt.datetime, end: dt.datetime
) -> dict[int, np.ndarray]:
    """Per backend: execution seconds of the window's timed attempts, the population of
    `stats.timed_attempts` (completed, not skipped, placed in the window)."""
    # One packed array per backend on PostgreSQL: 50 rows to fetch and convert rather than one
    # per attempt (86,000 at 30 days of the bench's density: 141 ms as rows, 88 as arrays, 18
    # packed and read from the `job_timed` index).
    if not downstream_ids:
        return {}
    source, params = timed_attempts_sql(downstream_ids, start, end)
    groups = float_groups(["downstream_id"], ["execution_seconds"], source, params)
    return {downstream_id: seconds for (downstream_id,), (seconds,) in groups.items()}


def _recent_results(
    downstream_ids: list[int], end: dt.datetime
) -> dict[int, tuple[dt.datetime, float | None]]:
    """Per backend: its last completed attempt before `end` and `stats.usual_gap_seconds` of
    its `RECENT_RESULTS` latest ones. Bounded work: on PostgreSQL one walk down the
    (downstream, placed_at) index per backend, the gaps and their percentile in SQL."""
    if connection.vendor != "postgresql":
        return _recent_results_portable(downstream_ids, end)
    table = Job._meta.db_table
    latest = (
        f"SELECT placed_at FROM {table} WHERE downstream_id = d.id AND status = %s"
        " AND placed_at < %s ORDER BY placed_at DESC LIMIT %s"
    )
    gap = "EXTRACT(EPOCH FROM placed_at - LAG(placed_at) OVER (ORDER BY placed_at))::float8"
    sql = (
        "SELECT d.id, max(r.placed_at), percentile_cont(%s) WITHIN GROUP (ORDER BY r.gap),"
        " count(*) FROM unnest(%s::bigint[]) AS d(id) CROSS JOIN LATERAL"
        f" (SELECT placed_at, {gap} AS gap FROM ({latest}) latest) r GROUP BY d.id"
    )
    params = [stats.USUAL_GAP_QUANTILE, downstream_ids, Job.Status.COMPLETED, end, RECENT_RESULTS]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {
            downstream_id: (last, gap if n >= stats.MIN_RESULTS_FOR_GAP else None)
            for downstream_id, last, gap, n in cursor.fetchall()
        }


def _recent_results_portable(
    downstream_ids: list[int], end: dt.datetime
) -> dict[int, tuple[dt.datetime, float | None]]:
    """`_recent_results` with a window function any database has (SQLite: the demo)."""
    newest_first = Window(
        RowNumber(), partition_by=[F("downstream_id")], order_by=F("placed_at").desc()
    )
    rows = (
        Job.objects.filter(
            downstream_id__in=downstream_ids, status=Job.Status.COMPLETED, placed_at__lt=end
        )
        .annotate(rank=newest_first)
        .filter(rank__lte=RECENT_RESULTS)
        .values_list("downstream_id", "placed_at")
    )
    times: dict[int, list[dt.datetime]] = defaultdict(list)
    for downstream_id, placed_at in rows:
        times[downstream_id].append(placed_at)
    return {
        downstream_id: (
            max(moments),
            stats.usual_gap_seconds(np.array([moment.timestamp() for moment in moments])),
        )
        for downstream_id, moments in times.items()
    }


def stuck_counts(
    downstream_ids: list[int], start: dt.datetime, end: dt.datetime, now: dt.datetime
) -> dict[int, int]:
    """Per backend: attempts since `start - FRAME_MARGIN` in progress for longer than
    `stats.DEFAULT_STUCK_AFTER` (the `stats.stuck_jobs` rule)."""
    if not downstream_ids:
        return {}
    backends, params = any_sql("j.downstream_id", downstream_ids)
    adapt = connection.ops.adapt_datetimefield_value
    statement = _STUCK.format(backends=backends)
    params += [adapt(start - FRAME_MARGIN), adapt(end), *stuck_params(now)]
    return dict(statement_rows(statement, params))


# Written out: compiled through the ORM (the OR of two receipts, the grouped count) the query
# cost more Python than the database spent answering it.
_STUCK = (
    f"SELECT j.downstream_id, COUNT(j.id) FROM {Job._meta.db_table} j WHERE {{backends}}"
    f" AND j.placed_at >= %s AND j.placed_at < %s AND {STUCK_SQL.format(row='j')}"
    " GROUP BY j.downstream_id"
)
