"""Reads of the derived layer (hud.models.derived): figures aggregated in SQL over its rows.

The counts come from the daily rollups; medians, which no sum can give, from one narrow query
over the window's timed attempts (three columns, no classification), so they stay exact.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import pandas as pd
from django.db.models import F, Sum

from hud import stats
from hud.models import DailyRollup, Job

_TALLY = {
    stats.SUCCESS: "success",
    stats.FAILURE: "failure",
    stats.TIMED_OUT: "timed_out",
    stats.CANCELLED: "cancelled",
    stats.SUPERSEDED: "superseded",
    stats.EXCLUDED: "excluded",
}
_SUMS = ("runs", "execution_n", "execution_ms", "end_to_end_n", "end_to_end_ms")


def daily_series(
    downstream_ids: list[int],
    start: dt.datetime,
    end: dt.datetime,
    events: Iterable[str] | None = None,
) -> dict[int, pd.DataFrame]:
    """`hud.stats.daily_series` of each backend over [start, end) (whole UTC days), read from
    the rollups; means are over durations summed in whole milliseconds."""
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
        rollups.values("downstream_id", "day").annotate(
            **{name: Sum(F(name)) for name in (*_TALLY.values(), *_SUMS)}
        ),
        columns=["downstream_id", "day", *_TALLY.values(), *_SUMS],
    )
    # Typed even when empty, so that days without rows fill with numbers, not objects.
    sums = sums.astype({name: "int64" for name in (*_TALLY.values(), *_SUMS)})
    sums["day"] = pd.to_datetime(sums["day"]).dt.tz_localize("UTC")
    medians = _medians(timed)
    out = {}
    for downstream_id in downstream_ids:
        mine = sums[sums["downstream_id"] == downstream_id].set_index("day")
        tally = mine[list(_TALLY.values())].rename(columns={v: k for k, v in _TALLY.items()})
        durations = pd.DataFrame(
            {
                "runs": mine["runs"],
                "mean_execution_seconds": _mean(mine["execution_ms"], mine["execution_n"]),
                "mean_end_to_end_seconds": _mean(mine["end_to_end_ms"], mine["end_to_end_n"]),
            }
        )
        durations = durations[durations["runs"] > 0].join(
            medians[medians["downstream_id"] == downstream_id].set_index("day"), how="left"
        )
        frame = stats.daily_frame(days, tally, durations.drop(columns="downstream_id"))
        out[downstream_id] = frame
    return out


def _mean(total_ms: pd.Series, n: pd.Series) -> pd.Series:
    return (total_ms / 1000.0 / n).where(n > 0)


def _medians(timed) -> pd.DataFrame:
    """Per backend and day: the median execution and end-to-end seconds of timed attempts."""
    rows = pd.DataFrame.from_records(
        timed.values_list("downstream_id", "placed_at", "queue_seconds", "execution_seconds"),
        columns=["downstream_id", "placed_at", "queue_seconds", "execution_seconds"],
    )
    rows["day"] = pd.to_datetime(rows["placed_at"], utc=True).dt.floor("D")
    rows["e2e"] = stats.end_to_end_seconds(
        rows.astype({"queue_seconds": float, "execution_seconds": float})
    )
    medians = rows.groupby(["downstream_id", "day"]).agg(
        p50_execution_seconds=("execution_seconds", "median"),
        p50_end_to_end_seconds=("e2e", "median"),
    )
    return medians.reset_index()
