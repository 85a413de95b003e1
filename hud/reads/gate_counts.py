"""A backend's gate metrics as of a moment after all its attempts, aggregated in SQL.

Once every attempt of a backend was placed before `as_of` (the periodic refresh, the daily
evaluation of the day just ended, an admin's request), the derived layer's rows *are* what
`stats.prepare` makes of all its attempts as of `as_of`. The gate's rates are then shares of
counts, so they are read as counts per UTC day (the day-clustered interval's unit), each day
split where a window starts: a few rows per backend and day instead of every logical job in
pandas. Timing means and percentiles, which no count gives, are taken over the window's
timed attempts read as three numeric columns. `tests/promotion/test_gate_counts.py` proves
every figure equal to `gates.gate_metrics` over the prepared attempts.

`SUPPORTED` names the metrics read this way; a backend whose criteria name another one, that
has an attempt placed at or after `as_of`, or that has exclusions is evaluated from its
prepared jobs instead (`hud.reads.gate`).
"""

from __future__ import annotations

import datetime as dt
import functools
import operator
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from django.db.models import Case, Count, F, IntegerField, Max, Q, Sum, Value, When
from django.db.models.functions import Coalesce, TruncDate

from hud import gates, stats
from hud.models import Job, LogicalJob
from hud.reads.rows import driver_rows

# Shares of logical jobs, shares of attempts, and figures of timed attempts' durations.
_JOB_SHARES = {"job_pass_rate": stats.SUCCESS, "timeout_rate": stats.TIMED_OUT}
TIMINGS = {
    f"{base}_{stat}" for base in ("queue_seconds", "execution_seconds", "end_to_end_seconds")
    for stat in ("mean", "p50", "p95")
}  # fmt: skip
SUPPORTED = frozenset({*_JOB_SHARES, "rerun_rate", "overrun_rate", "days_of_data", *TIMINGS})


def supports(criteria: Iterable[gates.Criterion]) -> bool:
    """Whether every metric `criteria` name is read here (caller metrics aside: the level
    start comes from the level history, the last result from `BackendCounts`)."""
    named = {criterion.metric for criterion in criteria}
    return named - {"days_at_level", "days_since_last_result"} <= SUPPORTED


def placed_before(ids: Sequence[int], as_of: dt.datetime) -> set[int]:
    """The backends of `ids` none of whose attempts was placed at or after `as_of`: the layer
    describes them as of `as_of`."""
    later = Job.objects.filter(downstream_id__in=ids, placed_at__gte=as_of)
    return set(ids) - set(later.values_list("downstream_id", flat=True).distinct())


@dataclass
class _Days:
    """Rows of counts per (UTC day, late): on a day a window starts, `late` rows are those at
    or after the start (every start has `as_of`'s time of day); on other days, all are not."""

    counts: dict[tuple[dt.date, bool], np.ndarray] = field(default_factory=dict)

    def add(self, day: dt.date, late: bool, values: Sequence[int]) -> None:
        row = np.asarray(values, dtype=np.int64)
        key = (day, bool(late))
        self.counts[key] = self.counts[key] + row if key in self.counts else row

    def share(
        self, hits: int, units: int, start: dt.datetime, end: dt.datetime, min_n: int, note=""
    ) -> stats.Estimate:
        """`stats.day_clustered_proportion` of the units counted in column `units` with hits
        in column `hits`, over [start, end) and the spread's look-back."""
        lookback = min(start, end - stats.SPREAD_LOOKBACK)
        per_day: dict[dt.date, list[int]] = defaultdict(lambda: [0, 0])
        window = [0, 0]
        for (day, late), row in self.counts.items():
            if _after(day, late, start):
                window[0] += int(row[hits])
                window[1] += int(row[units])
            if _after(day, late, lookback):
                per_day[day][0] += int(row[hits])
                per_day[day][1] += int(row[units])
        days = [per_day[day] for day in sorted(per_day) if per_day[day][1]]
        return stats.clustered_proportion(
            window[0],
            window[1],
            np.array([hit for hit, _ in days], dtype=np.int64),
            np.array([size for _, size in days], dtype=np.int64),
            min_n=min_n,
            note=note,
        )

    def total(self, column: int, start: dt.datetime) -> int:
        return sum(int(row[column]) for (day, late), row in self.counts.items()
                   if _after(day, late, start))  # fmt: skip

    def days(self, column: int, start: dt.datetime) -> int:
        """Distinct days with a count in `column` from `start` on."""
        return len({day for (day, late), row in self.counts.items()
                    if row[column] and _after(day, late, start)})  # fmt: skip


def _after(day: dt.date, late: bool, start: dt.datetime) -> bool:
    """Whether a (day, late) bucket lies at or after `start` (late: at or after `start`'s
    time of day, which every window start shares)."""
    first = start.astimezone(dt.UTC).date()
    return day > first or (day == first and late)


# Logical-job columns: one count per outcome class, then completed and re-run completed jobs.
_OUTCOMES = (stats.SUCCESS, stats.FAILURE, stats.TIMED_OUT, stats.CANCELLED,
             stats.SUPERSEDED, stats.EXCLUDED)  # fmt: skip
_COMPLETED, _RERUN = len(_OUTCOMES), len(_OUTCOMES) + 1
_COUNTED = len(_OUTCOMES) + 2  # success + failure + timed_out + cancelled, summed in Python
# Attempt columns: completed attempts, timed ones with a known overrun flag, overruns.
_ATTEMPTS, _KNOWN, _OVERRUN = 0, 1, 2


@dataclass
class BackendCounts:
    """What the gate reads of one backend as of `as_of`."""

    as_of: dt.datetime
    jobs: _Days = field(default_factory=_Days)
    attempts: _Days = field(default_factory=_Days)
    # Timed attempts: (the shortest window, in days, they fall in, queue s, execution s).
    timed: list[tuple[int, float, float]] = field(default_factory=list)
    last_result: dt.datetime | None = None

    def metric(self, name: str, start: dt.datetime, min_n: int) -> stats.Estimate:
        """`stats.compute_metric(name, prepared, start, as_of)` from the counts."""
        end = self.as_of
        if name in _JOB_SHARES:
            note = ""
            if name == "job_pass_rate":
                note = _excluded_note(self.jobs, start)
            hits = _OUTCOMES.index(_JOB_SHARES[name])
            return self.jobs.share(hits, _COUNTED, start, end, min_n, note)
        if name == "rerun_rate":
            return self.jobs.share(_RERUN, _COMPLETED, start, end, min_n)
        if name == "overrun_rate":
            return self.attempts.share(_OVERRUN, _KNOWN, start, end, min_n)
        if name == "days_of_data":
            return stats.exact_count(self.attempts.days(_ATTEMPTS, start), "days")
        base, _, stat = name.rpartition("_")
        values = self._durations(base, start)
        if stat == "mean":
            return stats.mean_estimate(values, min_n=min_n)
        return stats.percentile_estimate(values, int(stat[1:]) / 100, min_n=min_n)

    def _durations(self, base: str, start: dt.datetime) -> np.ndarray:
        days = round((self.as_of - start).total_seconds() / 86400)
        rows = [(queue, execution) for window, queue, execution in self.timed if window <= days]
        queue = np.array([row[0] for row in rows], dtype=float)
        execution = np.array([row[1] for row in rows], dtype=float)
        if base == "queue_seconds":
            return queue
        if base == "execution_seconds":
            return execution
        return execution + np.nan_to_num(queue, nan=0.0)  # NaN where execution is unknown

    def without(self, removed: Iterable[tuple[dt.datetime, str]]) -> BackendCounts:
        """These counts, for the pass rate, without the logical jobs (latest placed_at,
        outcome) given. A job off the windows' start days lands in a bucket of its day that
        `_after` never tells apart from the day's other one."""
        jobs = _Days(dict(self.jobs.counts))
        for placed_at, outcome in removed:
            row = np.zeros(_COUNTED + 1, dtype=np.int64)
            row[_OUTCOMES.index(outcome)] = -1
            row[_COUNTED] = -(outcome in stats.COUNTED)
            jobs.add(placed_at.astimezone(dt.UTC).date(), _late(placed_at, self.as_of), row)
        return BackendCounts(self.as_of, jobs, self.attempts, self.timed, self.last_result)


def _late(moment: dt.datetime, as_of: dt.datetime) -> bool:
    """Whether `moment` is at or after `as_of`'s time of day on its UTC day."""
    moment, as_of = moment.astimezone(dt.UTC), as_of.astimezone(dt.UTC)
    return moment.time() >= as_of.time()


def _excluded_note(days: _Days, start: dt.datetime) -> str:
    superseded = days.total(_OUTCOMES.index(stats.SUPERSEDED), start)
    excluded = days.total(_OUTCOMES.index(stats.EXCLUDED), start)
    return f"{superseded} superseded cancels and {excluded} skipped/neutral excluded"


def backend_counts(
    ids: Sequence[int], windows: Iterable[int], timing_days: int, as_of: dt.datetime
) -> dict[int, BackendCounts]:
    """The counts of each backend of `ids` over the windows (days before `as_of`), their
    spread's look-back, and `timing_days` of timed attempts (0: none read)."""
    starts = [as_of - dt.timedelta(days=days) for days in {*windows}]
    starts.append(as_of - stats.SPREAD_LOOKBACK)
    first = min(starts)
    out = {backend: BackendCounts(as_of) for backend in ids}
    day = TruncDate("placed_at", tzinfo=dt.UTC)
    late = _late_case(starts)
    span = Q(downstream_id__in=ids, placed_at__gte=first, placed_at__lt=as_of)
    completed = Q(latest_status=Job.Status.COMPLETED)
    jobs = (
        LogicalJob.objects.filter(span)
        .annotate(day=day, late=late)
        .values_list("downstream_id", "day", "late")
        .annotate(
            **{outcome: _count(Q(outcome=outcome)) for outcome in _OUTCOMES},
            completed=_count(completed),
            rerun=_count(completed & Q(attempts__gt=1)),
        )
        .order_by()
    )
    for backend, when, is_late, *counts in jobs:
        counted = sum(counts[_OUTCOMES.index(outcome)] for outcome in stats.COUNTED)
        out[backend].jobs.add(when, is_late, [*counts, counted])
    timed = Q(status=Job.Status.COMPLETED) & ~Q(conclusion=Job.Conclusion.SKIPPED)
    swept = Q(closed_by_sweeper=True)
    end_to_end = F("execution_seconds") + Coalesce("queue_seconds", Value(0.0))
    attempts = (
        Job.objects.filter(span, status=Job.Status.COMPLETED)
        .annotate(day=day, late=late, end_to_end=end_to_end)
        .values_list("downstream_id", "day", "late")
        .annotate(
            attempts=Count("id"),
            known=_count(timed & (swept | Q(execution_seconds__isnull=False))),
            overrun=_count(timed & (swept | Q(end_to_end__gt=stats.OVERRUN_SECONDS))),
        )
        .order_by()
    )
    for backend, when, is_late, *counts in attempts:
        out[backend].attempts.add(when, is_late, counts)
    if timing_days:
        _read_durations(out, ids, sorted({*windows, timing_days}), timing_days, as_of)
    for backend in ids:
        out[backend].last_result = (
            Job.objects.filter(downstream_id=backend, status=Job.Status.COMPLETED,
                               placed_at__lt=as_of)
            .aggregate(last=Max("placed_at"))["last"]
        )  # fmt: skip
    return out


def _read_durations(
    out: dict[int, BackendCounts],
    ids: Sequence[int],
    windows: Sequence[int],
    days: int,
    as_of: dt.datetime,
) -> None:
    """The queue and execution seconds of the timed attempts of the last `days` days, each
    with the shortest of `windows` it falls in, as the driver gives them: a placed_at per row
    cost more than the rest of the read."""
    shortest = Case(
        *(When(placed_at__gte=as_of - dt.timedelta(days=w), then=Value(w)) for w in windows),
        default=Value(days),
        output_field=IntegerField(),
    )
    rows = (
        Job.objects.filter(
            downstream_id__in=ids,
            status=Job.Status.COMPLETED,
            placed_at__gte=as_of - dt.timedelta(days=days),
            placed_at__lt=as_of,
        )
        .exclude(conclusion=Job.Conclusion.SKIPPED)
        .annotate(window=shortest)
        .values_list("downstream_id", "window", "queue_seconds", "execution_seconds")
        .order_by()
    )
    for backend, window, queue, execution in driver_rows(rows):
        out[backend].timed.append((window, _float(queue), _float(execution)))


def _float(value: float | None) -> float:
    return np.nan if value is None else float(value)


def _count(condition: Q) -> Sum:
    return Sum(Case(When(condition, then=Value(1)), default=Value(0)), output_field=IntegerField())


def _late_case(starts: Sequence[dt.datetime]) -> Case:
    """1 for a row placed on a window start's UTC day at or after it, else 0 (`_after`)."""
    cuts = [Q(placed_at__gte=start, placed_at__lt=_midnight_after(start)) for start in starts]
    return Case(
        When(functools.reduce(operator.or_, cuts), then=Value(True)),
        default=Value(False),
    )


def _midnight_after(moment: dt.datetime) -> dt.datetime:
    day = moment.astimezone(dt.UTC).date() + dt.timedelta(days=1)
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
