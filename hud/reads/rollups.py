"""Reads of the derived layer (hud.models.derived): figures aggregated in SQL over its rows.

The counts come from the daily rollups; medians, which no sum can give, from one narrow query
over the timed attempts of the days they are wanted for (three columns, no classification), so
they stay exact. A whole day's medians are kept in the cache with the fingerprint of that day's
rollup rows (their ids, how many, and their summed revisions, which every write that changes a
row raises), and read again only while the fingerprint is the same: a page re-reads the
attempts of today and of the past days written to since, not of the whole window. Each process
keeps a copy of what it read or kept (`_here`), checked against the same fingerprints, so a
page reads the shared cache only for backends whose days its copy does not answer.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections import defaultdict
from collections.abc import Iterable

import numpy as np
from django.core.cache import cache
from django.db import connection

from hud import stats
from hud.models import DailyRollup, Job
from hud.models.sql import any_sql
from hud.reads.rows import days_after_sql

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
# The rollup columns a daily table sums, in the order it reads them.
_SUMMED = (*OUTCOME_COLUMNS.values(), *_SUMS)


def daily_table(
    downstream_ids: list[int],
    start: dt.datetime,
    end: dt.datetime,
    events: Iterable[str] | None = None,
) -> dict[str, np.ndarray | list]:
    """`hud.stats.daily_series` of every backend over [start, end) (whole UTC days) as one
    table's columns (`downstream_id`, then the series' own), backend by backend, read from the
    rollups; means are over durations summed in whole milliseconds. Columns, not a frame: the
    API hands them out as they are (a DataFrame of 30 rows cost as much as reading them)."""
    dates = stats.utc_dates(start, end)
    events = None if events is None else sorted(set(events))
    first = dates[0]
    where, params = _rollup_filter(downstream_ids, first, dates[-1], events)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT downstream_id, {days_after_sql('day')}, {_ROLLUP_SUMS} WHERE {where}"
            " GROUP BY downstream_id, day",
            [first, *params],
        )
        read = np.array(cursor.fetchall(), dtype=np.int64).reshape(-1, 2 + _READ_COLUMNS)
    # Every (backend, day) is a row of the table, backend by backend: rows without rollups
    # stay zero. Every value read is an integer (the day as its offset in the window), so the
    # rows are one array, placed by position: the pandas joins and reindexing that did this
    # cost ~20 ms of the metrics page at 1M jobs, a Python key per row and Decimal sums ~2 ms.
    ids = np.asarray(downstream_ids, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    backend_rows = order[np.searchsorted(ids[order], read[:, 0])]
    rows = backend_rows * len(dates) + read[:, 1]
    sums = np.zeros((len(ids) * len(dates), len(_SUMMED)), dtype=np.int64)
    sums[rows] = read[:, 2 : 2 + len(_SUMMED)]
    # (backend, ISO day) → fingerprint (integers on either database), for the days with runs.
    iso_days = [day.isoformat() for day in dates]
    ran = read[read[:, 2 + _SUMMED.index("runs")] > 0]
    fingerprints = {
        (backend, iso_days[offset]): tuple(fingerprint)
        for backend, offset, *fingerprint in ran[:, [0, 1, *_FINGERPRINT_AT]].tolist()
    }
    summed = dict(zip(_SUMMED, sums.T, strict=True))
    durations = {
        "runs": summed["runs"],
        "mean_execution_seconds": _mean(summed["execution_ms"], summed["execution_n"]),
        "mean_end_to_end_seconds": _mean(summed["end_to_end_ms"], summed["end_to_end_n"]),
        "p50_execution_seconds": np.full(len(sums), np.nan),
        "p50_end_to_end_seconds": np.full(len(sums), np.nan),
    }
    row_of = {backend: index * len(dates) for index, backend in enumerate(downstream_ids)}
    day_of = {day: index for index, day in enumerate(iso_days)}
    for backend, day, execution, end_to_end in _medians(fingerprints, end, events):
        at = row_of[backend] + day_of[day]
        durations["p50_execution_seconds"][at] = np.nan if execution is None else execution
        durations["p50_end_to_end_seconds"][at] = np.nan if end_to_end is None else end_to_end
    counts = {outcome: summed[column] for outcome, column in OUTCOME_COLUMNS.items()}
    return {
        "downstream_id": np.repeat(ids, len(dates)),
        "day": dates * len(downstream_ids),
        **stats.daily_columns(counts, durations),
    }


def _mean(total_ms: np.ndarray, n: np.ndarray) -> np.ndarray:
    return np.where(n > 0, total_ms / 1000.0 / np.maximum(n, 1), np.nan)


MEDIANS_KEY = "rollups:medians:v1:{backend}:{events}"
MEDIANS_KEPT_SECONDS = 7 * 86400
# Longer than any window a page or the API reads (90 days).
MEDIANS_KEPT_DAYS = dt.timedelta(days=120)

# The daily table's two statements are written out, not built through the ORM: compiling
# them cost more than PostgreSQL spent answering (a backend's 30 days at 1M jobs: ~3 ms of
# Python around 1.3 ms of SQL). Per backend and day, the sums, then what tells whether the
# day's rows changed: their ids (a rebuild inserts new ones), how many, and their summed
# revisions (hud.models.derived.DailyRollup.revision, raised by every write).
_FINGERPRINT = ("COUNT(id)", "MIN(id)", "MAX(id)", "SUM(revision)")
# Cast, so PostgreSQL answers integers, not the numerics (Decimals) it sums bigints into.
_ROLLUP_SUMS = (
    f"{', '.join(f'CAST(SUM({column}) AS BIGINT)' for column in _SUMMED)},"
    f" {', '.join(f'CAST({value} AS BIGINT)' for value in _FINGERPRINT)}"
    f" FROM {DailyRollup._meta.db_table}"
)
_READ_COLUMNS = len(_SUMMED) + len(_FINGERPRINT)
# Where each fingerprint value sits in a row read (after the backend, the day and the sums).
_FINGERPRINT_AT = [2 + len(_SUMMED) + index for index in range(len(_FINGERPRINT))]
# The timed attempts (completed, not skipped), spelt as the partial index job_timed is, with
# literals: a parameter would not let PostgreSQL's generic plans prove the index applies.
_TIMED = (
    f"status = '{Job.Status.COMPLETED.value}'"
    f" AND NOT (conclusion = '{Job.Conclusion.SKIPPED.value}')"
)
# `stats.end_to_end_seconds`: execution plus queue time, execution alone without one.
_END_TO_END = "execution_seconds + COALESCE(queue_seconds, 0.0)"
_MEDIANS_SQL = (
    "SELECT downstream_id, (placed_at AT TIME ZONE 'UTC')::date,"
    " percentile_cont(0.5) WITHIN GROUP (ORDER BY execution_seconds),"
    f" percentile_cont(0.5) WITHIN GROUP (ORDER BY {_END_TO_END})"
    f" FROM {Job._meta.db_table} WHERE {{where}} GROUP BY 1, 2"
)
# Elsewhere (the demo's SQLite, which stores UTC text) the values are read and reduced here.
_MEDIAN_VALUES_SQL = (
    f"SELECT downstream_id, date(placed_at), execution_seconds, {_END_TO_END}"
    f" FROM {Job._meta.db_table} WHERE {{where}}"
)


def _rollup_filter(
    downstream_ids: list[int], first: dt.date, last: dt.date, events: list[str] | None
) -> tuple[str, list]:
    """The WHERE clause of a daily table's rollup rows, and its parameters."""
    backends, params = any_sql("downstream_id", downstream_ids)
    where = f"day >= %s AND day <= %s AND {backends}"
    params = [first, last, *params]
    if events is not None:
        kinds, more = any_sql("event_type", events)
        where, params = f"{where} AND {kinds}", params + more
    return where, params


def _medians(
    fingerprints: dict[tuple[int, str], tuple[int, ...]],
    end: dt.datetime,
    events: list[str] | None,
) -> list[tuple[int, str, float | None, float | None]]:
    """Per backend and day with runs (`fingerprints`): (backend, ISO day, median execution
    seconds, median end-to-end seconds) of its timed attempts placed before `end` (None where
    none is known). A whole day (one that ends by `end`) whose rollup rows kept their
    fingerprint is read from this process's copy or the shared cache; the others are read
    from the attempts and the whole ones kept in both."""
    events_key = ",".join(events) if events is not None else "*"
    keys = {
        backend: MEDIANS_KEY.format(backend=backend, events=events_key)
        for backend in sorted({backend for backend, _ in fingerprints})
    }
    whole_before = end.astimezone(dt.UTC).date().isoformat()
    here = _kept_here()
    # The copy's entries are shared by the process's threads: read, never changed in place
    # (an entry changed is a new dict, put in its place).
    kept = {backend: here.get(key, {}) for backend, key in keys.items()}
    rows, unanswered = [], defaultdict(list)
    for (backend, day), fingerprint in fingerprints.items():
        hit = _kept_day(kept[backend], day, fingerprint, whole_before)
        if hit is None:
            unanswered[backend].append(day)
        else:
            rows.append((backend, day, *hit))
    # The shared cache, for the backends with a whole day this process's copy does not
    # answer (another process may have kept it): 50 entries read from it were a tenth of the
    # metrics page. Of the two, a day's entry that matches its fingerprint stands.
    asking = sorted(b for b, days in unanswered.items() if min(days) < whole_before)
    found = cache.get_many([keys[backend] for backend in asking]) if asking else {}
    missing = defaultdict(list)
    for backend, days in unanswered.items():
        if keys[backend] in found:
            current = {
                day: value
                for day, value in kept[backend].items()
                if fingerprints.get((backend, day)) == value[0]
            }
            kept[backend] = here[keys[backend]] = {**found[keys[backend]], **current}
        for day in days:
            hit = _kept_day(kept[backend], day, fingerprints[(backend, day)], whole_before)
            if hit is None:
                missing[day].append(backend)
            else:
                rows.append((backend, day, *hit))
    if missing:
        # Days no window reaches any more are dropped as an entry is written again.
        oldest = (_midnight(whole_before) - MEDIANS_KEPT_DAYS).date().isoformat()
        changed: dict[str, dict[str, tuple]] = {}
        for backend, day, execution, end_to_end in _median_rows(missing, end, events):
            rows.append((backend, day, execution, end_to_end))
            if day < whole_before and (backend, day) in fingerprints:
                key = keys[backend]
                if key not in changed:  # this request's own new entry
                    changed[key] = {d: v for d, v in kept[backend].items() if d >= oldest}
                changed[key][day] = (fingerprints[(backend, day)], execution, end_to_end)
        if changed:
            cache.set_many(changed, MEDIANS_KEPT_SECONDS)
            here.update(changed)
    return rows


def _kept_day(
    entry: dict[str, tuple], day: str, fingerprint: tuple, whole_before: str
) -> tuple | None:
    """The (execution, end-to-end) medians of `day` in a backend's kept entry, if the day is
    whole and they were kept under the fingerprint it has now; else None."""
    hit = entry.get(day)
    if day < whole_before and hit is not None and hit[0] == fingerprint:
        return hit[1], hit[2]
    return None


# This process's copy of the kept medians (cache key → the entry), valid while the shared
# cache keeps the same epoch: clearing the cache (an operator, or each test) clears every
# process's copy too, so no copy outlives the rows its fingerprints describe (SQLite gives a
# rolled-back row's id to the next one). At most `_HERE_KEYS` entries, then it starts again.
# Replaced whole, (epoch, entries) at once, so no thread sees one epoch with another's entries.
_here: tuple[str | None, dict[str, dict[str, tuple]]] = (None, {})
_HERE_KEYS = 4096
MEDIANS_EPOCH_KEY = "rollups:medians:epoch"


def _kept_here() -> dict[str, dict[str, tuple]]:
    """This process's copy of the kept medians, emptied when the shared cache's epoch is
    not the one it was filled under (a cleared cache draws a new one) or it grew too big."""
    global _here
    epoch = cache.get(MEDIANS_EPOCH_KEY)
    if epoch is None:
        epoch = secrets.token_hex(8)
        # Another process may draw one at the same moment: the first written stands.
        if not cache.add(MEDIANS_EPOCH_KEY, epoch, timeout=None):
            epoch = cache.get(MEDIANS_EPOCH_KEY, epoch)
    copy = _here
    if copy[0] != epoch or len(copy[1]) > _HERE_KEYS:
        copy = _here = (epoch, {})
    return copy[1]


_DAY = dt.timedelta(days=1)


def _midnight(day: str) -> dt.datetime:
    return dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC)


def _median_rows(
    wanted: dict[str, list[int]], end: dt.datetime, events: list[str] | None
) -> list[tuple[int, str, float | None, float | None]]:
    """(backend, ISO day, median execution, median end-to-end seconds) of the timed attempts
    placed before `end` on each ISO day of `wanted` by its backends; on PostgreSQL the
    medians are taken in SQL."""
    adapt = connection.ops.adapt_datetimefield_value
    days, params = [], []
    for day, backends in sorted(wanted.items()):
        of_backends, more = any_sql("downstream_id", backends)
        days.append(f"(placed_at >= %s AND placed_at < %s AND {of_backends})")
        params += [adapt(_midnight(day)), adapt(_midnight(day) + _DAY), *more]
    where = f"{_TIMED} AND placed_at < %s AND ({' OR '.join(days)})"
    params = [adapt(end), *params]
    if events is not None:
        kinds, more = any_sql("event_type", events)
        where, params = f"{where} AND {kinds}", params + more
    postgresql = connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        cursor.execute(
            (_MEDIANS_SQL if postgresql else _MEDIAN_VALUES_SQL).format(where=where), params
        )
        read = cursor.fetchall()
    if not postgresql:
        read = _grouped_medians(read)
    return [
        (int(backend), str(day)[:10], _number(execution), _number(end_to_end))
        for backend, day, execution, end_to_end in read
    ]


def _grouped_medians(values: list[tuple]) -> list[tuple]:
    """(backend, day, execution, end to end) rows → one row per (backend, day) with the
    medians of its known values (NaN where none is)."""
    grouped: dict[tuple, list[tuple]] = defaultdict(list)
    for backend, day, *durations in values:
        grouped[(backend, day)].append(durations)
    out = []
    for key, durations in grouped.items():
        columns = np.array(durations, dtype=float).T
        medians = [np.median(c[~np.isnan(c)]) if (~np.isnan(c)).any() else np.nan for c in columns]
        out.append((*key, *medians))
    return out


def _number(value: float | None) -> float | None:
    """A median as a plain float, None for none (no timed value that day)."""
    return None if value is None or np.isnan(value) else float(value)
