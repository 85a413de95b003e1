"""Rows of a query as the database driver returns them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection

from django.db import connection


def driver_rows(queryset, *, utc: Collection[int] = ()) -> list[tuple]:
    """The rows of a `values_list()` queryset as the driver gives them, without Django's
    converters or its iteration in chunks of 100: an aggregate or cast output calls a converter
    in Python per value (`int()` of a sum, `float()` of a median, TruncDate's check), about
    0.7 µs each, and 49,000 rows of plain columns cost 80 ms more through a queryset than
    fetched at once. For readers that type the columns themselves (pandas); a date comes back a
    `date` on PostgreSQL, text on SQLite. `utc`: the positions of datetime columns (a column
    of a table, not an expression), which SQLite's driver gives naive (the UTC Django stores):
    they get UTC attached, so they compare as the queryset's would."""
    with connection.cursor() as cursor:
        cursor.execute(*queryset.query.sql_with_params())
        rows = cursor.fetchall()
    if utc and connection.vendor == "sqlite":
        rows = [
            tuple(
                value.replace(tzinfo=dt.UTC) if index in utc and value is not None else value
                for index, value in enumerate(row)
            )
            for row in rows
        ]
    return rows
