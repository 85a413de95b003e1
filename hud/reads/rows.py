"""Rows of a query as the database driver returns them."""

from __future__ import annotations

from django.db import connection


def driver_rows(queryset) -> list[tuple]:
    """The rows of a `values_list()` queryset as the driver gives them, without Django's
    converters: an aggregate or cast output calls one in Python per value (`int()` of a sum,
    `float()` of a median, TruncDate's check), about 0.7 µs each. For readers that type the
    columns themselves (pandas); a date comes back a `date` on PostgreSQL, text on SQLite."""
    with connection.cursor() as cursor:
        cursor.execute(*queryset.query.sql_with_params())
        return cursor.fetchall()
