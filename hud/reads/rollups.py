"""Reads of the derived layer (hud.models.derived): figures aggregated in SQL over its rows.

The counts come from the daily rollups; medians, which no sum can give, from one narrow query
over the timed attempts of the days they are wanted for (three columns, no classification), so
they stay exact. A whole day's medians are kept in the cache with the fingerprint of that day's
rollup rows (their ids, how many, and their summed revisions, which every write that changes a
row raises), and read again only while the fingerprint is the same: a page re-reads the
attempts of today and of the past days written to since, not of the whole window.
"""

from __future__ import annotations

import datetime as dt
import functools
import operator
from collections import defaultdict
from collections.abc import Iterable

import pandas as pd
from django.core.cache import cache
from django.db import connection
from django.db.models import Aggregate, Case, Count, F, FloatField, Max, Min, Q, Sum, When
from django.db.models.functions import Coalesce, TruncDate

from hud import stats
from hud.models import DailyRollup, Job
from hud.reads.rows import driver_rows

# The daily rollup's column of each outcome class.
OUTCOME_COLUMNS = {
    stats.SUCCESS: "success",
    stats.FAILURE: "failure",
    stats.TIMED_OUT: "timed_out",
    stats.CANCELLED: "cancelled",
    stats.SUPERSEDED: "superseded",
    stats.EXCLUDED: "excluded",
}
_SUMS = ("runs", "execution_n", "execution_ms", "end_to_end_n", "end_to_end_ms")


def daily_table(
    downstream_ids: list[int],
    start: dt.datetime,
    end: dt.datetime,
    events: Iterable[str] | None = None,
) -> pd.DataFrame:
    """`hud.stats.daily_series` of every backend over [start, end) (whole UTC days) as one
    table with a `downstream_id` column, read from the rollups; means are over durations
    summed in whole milliseconds."""
    days = stats.day_index(start, end)
    rollups = DailyRollup.objects.filter(
        downstream_id__in=downstream_ids, day__gte=days[0].date(), day__lte=days[-1].date()
    )
    timed = Job.objects.filter(
        downstream_id__in=downstream_ids,
        status=Job.Status.COMPLETED,
        placed_at__gte=days[0],
        placed_at__lt=end,
    ).exclude(conclusion=Job.Conclusion.SKIPPED)
    if events is not None:
        rollups = rollups.filter(event_type__in=list(events))
        timed = timed.filter(event_type__in=list(events))
    read = driver_rows(
        rollups.values_list("downstream_id", "day").annotate(
            **{name: Sum(F(name)) for name in (*OUTCOME_COLUMNS.values(), *_SUMS)},
            **_FINGERPRINT,
        )
    )
    # (backend, ISO day) → fingerprint, for the days with timed runs.
    runs = 2 + len(OUTCOME_COLUMNS)
    fingerprints = {
        (row[0], str(row[1])[:10]): tuple(map(int, row[-len(_FINGERPRINT) :]))
        for row in read
        if row[runs]
    }
    sums = pd.DataFrame.from_records(
        [row[: -len(_FINGERPRINT)] for row in read],
        columns=["downstream_id", "day", *OUTCOME_COLUMNS.values(), *_SUMS],
    )
    # Typed even when empty, so that days without rows fill with numbers, not objects.
    sums = sums.astype({name: "int64" for name in (*OUTCOME_COLUMNS.values(), *_SUMS)})
    sums["day"] = pd.to_datetime(sums["day"]).dt.tz_localize("UTC")
    sums = sums.set_index(["downstream_id", "day"])
    tally = sums[list(OUTCOME_COLUMNS.values())].rename(
        columns={column: outcome for outcome, column in OUTCOME_COLUMNS.items()}
    )
    durations = pd.DataFrame(
        {
            "runs": sums["runs"],
            "mean_execution_seconds": _mean(sums["execution_ms"], sums["execution_n"]),
            "mean_end_to_end_seconds": _mean(sums["end_to_end_ms"], sums["end_to_end_n"]),
        }
    )
    medians = _medians(timed, fingerprints, end, events).set_index(["downstream_id", "day"])
    durations = durations[durations["runs"] > 0].join(medians, how="left")
    every_day = pd.MultiIndex.from_product([downstream_ids, days], names=["downstream_id", "day"])
    return stats.daily_frame(every_day, tally, durations)


def _mean(total_ms: pd.Series, n: pd.Series) -> pd.Series:
    return (total_ms / 1000.0 / n).where(n > 0)


# What tells whether a day's rollup rows changed: their ids (a rebuild inserts new ones), how
# many, and their summed revisions (hud.models.derived.DailyRollup.revision).
_FINGERPRINT = {
    "rows": Count("id"),
    "first_id": Min("id"),
    "last_id": Max("id"),
    "revisions": Sum("revision"),
}
MEDIANS_KEY = "rollups:medians:v1:{backend}:{events}"
MEDIANS_KEPT_SECONDS = 7 * 86400
# Longer than any window a page or the API reads (90 days).
MEDIANS_KEPT_DAYS = dt.timedelta(days=120)
_MEDIAN_COLUMNS = ["downstream_id", "day", "p50_execution_seconds", "p50_end_to_end_seconds"]


def _medians(
    timed,
    fingerprints: dict[tuple[int, str], tuple[int, ...]],
    end: dt.datetime,
    events: Iterable[str] | None,
) -> pd.DataFrame:
    """Per backend and day with runs (`fingerprints`): the median execution and end-to-end
    seconds of its timed attempts (`stats.end_to_end_seconds`). A whole day (one that ends by
    `end`) whose rollup rows kept their fingerprint is read from the cache; the others are
    taken from `timed` and the whole ones kept."""
    events_key = ",".join(sorted(set(events))) if events is not None else "*"
    keys = {
        backend: MEDIANS_KEY.format(backend=backend, events=events_key)
        for backend in sorted({backend for backend, _ in fingerprints})
    }
    found = cache.get_many(list(keys.values()))
    kept = {backend: found.get(key, {}) for backend, key in keys.items()}
    whole_before = end.astimezone(dt.UTC).date().isoformat()
    rows, missing = [], defaultdict(list)
    for (backend, day), fingerprint in fingerprints.items():
        hit = kept[backend].get(day)
        if day < whole_before and hit is not None and hit[0] == fingerprint:
            rows.append((backend, day, hit[1], hit[2]))
        else:
            missing[day].append(backend)
    if missing:
        wanted = functools.reduce(
            operator.or_,
            (
                Q(placed_at__gte=_midnight(day), placed_at__lt=_midnight(day) + _DAY)
                & Q(downstream_id__in=backends)
                for day, backends in sorted(missing.items())
            ),
        )
        changed = set()
        for backend, day, execution, end_to_end in _median_rows(timed.filter(wanted)):
            rows.append((backend, day, execution, end_to_end))
            if day < whole_before and (backend, day) in fingerprints:
                kept[backend][day] = (fingerprints[(backend, day)], execution, end_to_end)
                changed.add(backend)
        if changed:
            # Days no window reaches any more are dropped as an entry is written again.
            oldest = (_midnight(whole_before) - MEDIANS_KEPT_DAYS).date().isoformat()
            cache.set_many(
                {keys[b]: {d: v for d, v in kept[b].items() if d >= oldest} for b in changed},
                MEDIANS_KEPT_SECONDS,
            )
    frame = pd.DataFrame.from_records(rows, columns=_MEDIAN_COLUMNS)
    frame = frame.astype({"p50_execution_seconds": float, "p50_end_to_end_seconds": float})
    frame["day"] = pd.to_datetime(frame["day"]).dt.tz_localize("UTC")
    return frame


_DAY = dt.timedelta(days=1)


def _midnight(day: str) -> dt.datetime:
    return dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC)


def _median_rows(timed) -> list[tuple[int, str, float | None, float | None]]:
    """(backend, ISO day, median execution, median end-to-end seconds) of the attempts
    `timed`; on PostgreSQL the medians are taken in SQL."""
    execution = F("execution_seconds")
    end_to_end = Case(
        When(execution_seconds__isnull=False, then=execution + Coalesce("queue_seconds", 0.0)),
        output_field=FloatField(),
    )
    per_day = timed.annotate(day=TruncDate("placed_at", tzinfo=dt.UTC), e2e=end_to_end)
    if connection.vendor == "postgresql":
        read = driver_rows(
            per_day.values_list("downstream_id", "day")
            .annotate(execution=Median(execution), e2e_median=Median(F("e2e")))
            .order_by()
        )
    else:
        values = pd.DataFrame.from_records(
            per_day.values_list("downstream_id", "day", "execution_seconds", "e2e").order_by(),
            columns=_MEDIAN_COLUMNS,
        )
        values = values.astype({"p50_execution_seconds": float, "p50_end_to_end_seconds": float})
        read = values.groupby(["downstream_id", "day"], as_index=False).median()
        read = read.itertuples(index=False, name=None)
    return [
        (int(backend), str(day)[:10], _number(execution), _number(end_to_end))
        for backend, day, execution, end_to_end in read
    ]


def _number(value: float | None) -> float | None:
    """A median as a plain float, None for none (no timed value that day)."""
    return None if value is None or pd.isna(value) else float(value)


class Median(Aggregate):
    """PostgreSQL's exact median (linear interpolation, as pandas' median), nulls ignored."""

    name = "Median"
    function = "percentile_cont"
    template = "%(function)s(0.5) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()
