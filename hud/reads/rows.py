"""Rows of a query as the database driver returns them, float columns per group as arrays, and
the pieces of written-out statements: a column among values, the UTC day of a time column, the
days from a date to a date column."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Collection, Sequence

import numpy as np
from django.db import connection
from django.db.models.functions import TruncDate

from hud import stats
from hud.models import Job
from hud.models.sql import any_sql, statement_rows


def driver_rows(queryset, *, utc: Collection[int] = ()) -> list[tuple]:
    """The rows of a `values_list()` queryset as the driver gives them, without Django's
    converters or its iteration in chunks of 100: an aggregate or cast output calls a converter
    in Python per value (`int()` of a sum, `float()` of a median, TruncDate's check), about
    0.7 µs each, and 49,000 rows of plain columns cost 80 ms more through a queryset than
    fetched at once. For readers that type the columns themselves (pandas); a date comes back a
    `date` on PostgreSQL, text on SQLite. `utc`: as `statement_rows`."""
    return statement_rows(*queryset.query.sql_with_params(), utc=utc)


def float_groups(
    keys: Sequence[str],
    columns: Sequence[str],
    source: str,
    params: Sequence,
    key_params: Sequence = (),
) -> dict[tuple, list[np.ndarray]]:
    """Per distinct value of `keys` (SQL expressions, with `key_params`), the `columns` of the
    rows of `source` (a written-out `FROM … WHERE …`, with `params`) as float arrays (NULL as
    NaN), aligned row by row. On PostgreSQL each group's values come packed in one `bytea` of
    big-endian doubles per column (two in one group see its rows in the same order, so their
    values pair up: 86,055 execution seconds of 50 backends took 17 ms, against 52 ms as
    arrays, whose text psycopg parses into a Python float per value); elsewhere (the demo's
    SQLite) the rows are read and grouped here."""
    width = len(keys)
    if connection.vendor == "postgresql":
        packed = [f"string_agg(float8send(COALESCE({c}, 'NaN')), ''::bytea)" for c in columns]
        by = ", ".join(str(position) for position in range(1, width + 1))
        statement = f"SELECT {', '.join([*keys, *packed])} {source} GROUP BY {by}"
        rows = statement_rows(statement, [*key_params, *params])
        return {tuple(row[:width]): [_unpack_floats(v) for v in row[width:]] for row in rows}
    grouped: dict[tuple, list[tuple]] = defaultdict(list)
    statement = f"SELECT {', '.join([*keys, *columns])} {source}"
    for row in statement_rows(statement, [*key_params, *params]):
        grouped[row[:width]].append(row[width:])
    return {
        key: [np.array(values, dtype="float64") for values in zip(*rows, strict=True)]
        for key, rows in grouped.items()
    }


# `stats.is_stuck` over a job row (`{row}`: its table or alias): in progress, and its
# in_progress receipt, else its placement, more than `stats.DEFAULT_STUCK_AFTER` before now.
# Its parameters: `stuck_params`.
STUCK_SQL = "{row}.status = %s AND COALESCE({row}.in_progress_received_at, {row}.placed_at) < %s"


def stuck_params(now: dt.datetime) -> list:
    """The parameters of `STUCK_SQL` as of `now`."""
    adapt = connection.ops.adapt_datetimefield_value
    return [Job.Status.IN_PROGRESS, adapt(now - stats.DEFAULT_STUCK_AFTER)]


def timed_attempts_sql(
    ids: Sequence[int], start: dt.datetime, end: dt.datetime
) -> tuple[str, list]:
    """`FROM … WHERE …` of the timed attempts of backends `ids` placed in [start, end): the
    population of `stats.timed_attempts` (completed, not skipped), and its parameters."""
    backends, params = any_sql("downstream_id", ids)
    adapt = connection.ops.adapt_datetimefield_value
    source = (
        f"FROM {Job._meta.db_table} WHERE {backends} AND status = %s"
        " AND placed_at >= %s AND placed_at < %s AND NOT (conclusion = %s)"
    )
    return source, [
        *params, Job.Status.COMPLETED, adapt(start), adapt(end), Job.Conclusion.SKIPPED,
    ]  # fmt: skip


def _unpack_floats(packed: bytes | memoryview | None) -> np.ndarray:
    return np.frombuffer(packed or b"", dtype=">f8").astype("float64")


class UtcDate(TruncDate):
    """The UTC day of a time column: `TruncDate(column, tzinfo=UTC)`, but on SQLite the
    built-in `date()` of the UTC text Django stores, where Django calls a Python function per
    row (`django_datetime_cast_date`): the gate's counts of the demo's busiest backend over 90
    days spent most of their time in it."""

    def __init__(self, column: str) -> None:
        super().__init__(column, tzinfo=dt.UTC)

    def as_sqlite(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.lhs)
        return utc_day_sql(sql), params


def utc_day_sql(column: str) -> str:
    """SQL of the UTC day (a date) of a time column, as `UtcDate` compiles it."""
    if connection.vendor == "sqlite":
        return f"date({column})"
    return f"({column} AT TIME ZONE 'UTC')::date"


def days_after_sql(column: str) -> str:
    """SQL of the whole days from a date parameter (its one %s) to a date column."""
    if connection.vendor == "postgresql":
        return f"{column} - %s::date"
    return f"CAST(julianday({column}) - julianday(%s) AS INTEGER)"
