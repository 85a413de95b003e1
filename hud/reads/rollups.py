"""Reads of the derived layer (hud.models.derived): figures aggregated in SQL over its rows.

The counts come from the daily rollups; medians, which no sum can give, from one narrow query
over the window's timed attempts (three columns, no classification), so they stay exact.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import pandas as pd
from django.db import connection
from django.db.models import Aggregate, Case, F, FloatField, Sum, When
from django.db.models.functions import Coalesce, TruncDate

from hud import stats
from hud.models import DailyRollup, Job
from hud.reads.rows import driver_rows

_TALLY = {
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
    sums = pd.DataFrame.from_records(
        driver_rows(
            rollups.values_list("downstream_id", "day").annotate(
                **{name: Sum(F(name)) for name in (*_TALLY.values(), *_SUMS)}
            )
        ),
        columns=["downstream_id", "day", *_TALLY.values(), *_SUMS],
    )
    # Typed even when empty, so that days without rows fill with numbers, not objects.
    sums = sums.astype({name: "int64" for name in (*_TALLY.values(), *_SUMS)})
    sums["day"] = pd.to_datetime(sums["day"]).dt.tz_localize("UTC")
    sums = sums.set_index(["downstream_id", "day"])
    tally = sums[list(_TALLY.values())].rename(columns={v: k for k, v in _TALLY.items()})
    durations = pd.DataFrame(
        {
            "runs": sums["runs"],
            "mean_execution_seconds": _mean(sums["execution_ms"], sums["execution_n"]),
            "mean_end_to_end_seconds": _mean(sums["end_to_end_ms"], sums["end_to_end_n"]),
        }
    )
    medians = _medians(timed).set_index(["downstream_id", "day"])
    durations = durations[durations["runs"] > 0].join(medians, how="left")
    every_day = pd.MultiIndex.from_product([downstream_ids, days], names=["downstream_id", "day"])
    return stats.daily_frame(every_day, tally, durations)


def _mean(total_ms: pd.Series, n: pd.Series) -> pd.Series:
    return (total_ms / 1000.0 / n).where(n > 0)


def _medians(timed) -> pd.DataFrame:
    """Per backend and day: the median execution and end-to-end seconds of timed attempts
    (`stats.end_to_end_seconds`); on PostgreSQL the medians are taken in SQL."""
    execution = F("execution_seconds")
    end_to_end = Case(
        When(execution_seconds__isnull=False, then=execution + Coalesce("queue_seconds", 0.0)),
        output_field=FloatField(),
    )
    per_day = timed.annotate(day=TruncDate("placed_at", tzinfo=dt.UTC), e2e=end_to_end)
    columns = ["downstream_id", "day", "p50_execution_seconds", "p50_end_to_end_seconds"]
    if connection.vendor == "postgresql":
        rows = pd.DataFrame.from_records(
            driver_rows(
                per_day.values_list("downstream_id", "day")
                .annotate(execution=Median(execution), e2e_median=Median(F("e2e")))
                .order_by()
            ),
            columns=columns,
        )
    else:
        values = pd.DataFrame.from_records(
            per_day.values_list("downstream_id", "day", "execution_seconds", "e2e").order_by(),
            columns=columns,
        )
        values = values.astype({"p50_execution_seconds": float, "p50_end_to_end_seconds": float})
        rows = values.groupby(["downstream_id", "day"], as_index=False).median()
    rows = rows.astype({"p50_execution_seconds": float, "p50_end_to_end_seconds": float})
    rows["day"] = pd.to_datetime(rows["day"]).dt.tz_localize("UTC")
    return rows


class Median(Aggregate):
    """PostgreSQL's exact median (linear interpolation, as pandas' median), nulls ignored."""

    name = "Median"
    function = "percentile_cont"
    template = "%(function)s(0.5) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()
