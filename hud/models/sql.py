"""The statements every callback runs, written out once as plain SQL.

The callback path (`hud.ingestion.ingest`) runs these on every request; building them through
the ORM
cost more CPU than the database spent answering them (docs/performance.md, "Ingestion"). They
are portable between PostgreSQL and SQLite (%s placeholders, `ON CONFLICT`, `RETURNING`), and
`bench/ingest.py` runs the very same strings through psycopg as its floor. Rare branches (a
first callback of a backend, an alias, a re-run's queue time) stay in the ORM.

`tests/ingestion/test_sql.py` checks the column lists against the models, so a new field cannot be
silently left out.

Below them, what every layer's written-out reads share: a column among values (`any_sql`),
running a statement (`statement_rows`) and making model instances of its rows (`instance`).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Collection, Iterable, Sequence
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections, models

ModelT = TypeVar("ModelT", bound=models.Model)

# --- Token replay (hud.ingestion.ingest.spend_token) ----------------------------------------------

# A replayed token id inserts nothing (rowcount 0) instead of failing: no error to roll back.
CONSUME_JTI = (
    "INSERT INTO hud_usedtoken (jti, expires_at) VALUES (%s, %s) ON CONFLICT (jti) DO NOTHING"
)

# --- Admission (hud.levels.find_downstream, hud.ingestion.ingest.take_rate_token) -----------------

DOWNSTREAM_COLUMNS = (
    "id",
    "full_name",
    "level",
    "device",
    "oncalls",
    "delisted",
    "pending_upstream",
    "created_at",
)
# The constraint downstream_name_ci_unique indexes LOWER(full_name).
FIND_DOWNSTREAM = (
    f"SELECT {', '.join(DOWNSTREAM_COLUMNS)} FROM hud_downstream WHERE LOWER(full_name) = %s"
)

# Refill, then spend, in one conditional UPDATE; LEAST/GREATEST are MIN/MAX on SQLite.
_TAKE_RATE_TOKEN = (
    "UPDATE hud_ratebucket SET tokens = {refilled} - 1.0, updated_epoch = %s"
    " WHERE downstream_id = %s AND {refilled} >= 1.0"
)
_REFILLED = "{least}(%s, tokens + {greatest}(%s - updated_epoch, 0.0) * %s)"


@functools.cache
def take_rate_token(vendor: str) -> str:
    """The take-a-token UPDATE for a database vendor; parameters from `rate_token_params`."""
    least, greatest = ("LEAST", "GREATEST") if vendor == "postgresql" else ("MIN", "MAX")
    return _TAKE_RATE_TOKEN.format(refilled=_REFILLED.format(least=least, greatest=greatest))


def rate_token_params(
    downstream_id: int, now: float, capacity: float, per_second: float
) -> tuple[float | int, ...]:
    """The parameters of `take_rate_token`, in order."""
    refilled = (capacity, now, per_second)
    return (*refilled, now, downstream_id, *refilled)


# --- The state machine (hud.ingestion.ingest.store) -----------------------------------------------

# What a callback needs of its delivery (not the stored webhook body, tens of KB of JSON), and
# the dispatch of that delivery to this backend, in one round trip.
FIND_DELIVERY = (
    "SELECT d.id, d.delivery_id, d.event_type, d.pr_number, d.head_sha, d.ref,"
    " p.id, p.dispatched_at FROM hud_delivery d LEFT JOIN hud_dispatch p"
    " ON p.delivery_id = d.id AND p.downstream_id = %s WHERE d.delivery_id = %s"
)

# Every column but the primary key, in model order.
JOB_COLUMNS = (
    "downstream_id",
    "delivery_id",
    "workflow_name",
    "job_name",
    "check_run_id",
    "event_type",
    "pr_number",
    "head_sha",
    "ref",
    "dispatch_id",
    "verified",
    "source",
    "run_id",
    "run_attempt",
    "workflow_url",
    "status",
    "conclusion",
    "closed_by_sweeper",
    "reported_started_at",
    "reported_completed_at",
    "in_progress_received_at",
    "completed_received_at",
    "placed_at",
    "updated_at",
    "queue_seconds",
    "execution_seconds",
    "timing_source",
    "tests_passed",
    "tests_failed",
    "tests_skipped",
    "tests_total",
    "failed_tests_truncated",
    "artifact_url",
    "environment",
    "triage_verdict",
)
# The row key (constraint job_row_key): downstream, delivery, workflow, job name, check run.
_JOB_KEY = (
    "downstream_id = %s AND delivery_id = %s AND workflow_name = %s AND job_name = %s"
    " AND check_run_id = %s"
)


@functools.cache
def lock_job(has_select_for_update: bool) -> str:
    """The job with a row key, locked for the transaction where the database can (PostgreSQL;
    SQLite's IMMEDIATE transactions already hold the write lock)."""
    lock = " FOR UPDATE" if has_select_for_update else ""
    return f"SELECT id, {', '.join(JOB_COLUMNS)} FROM hud_job WHERE {_JOB_KEY}{lock}"


# A concurrent identical callback that won the insert leaves no row returned.
INSERT_JOB = (
    f"INSERT INTO hud_job ({', '.join(JOB_COLUMNS)})"
    f" VALUES ({', '.join(['%s'] * len(JOB_COLUMNS))}) ON CONFLICT DO NOTHING RETURNING id"
)

# What a completed callback sets on a job that was in progress (or closed by the sweeper).
COMPLETION_COLUMNS = (
    "status",
    "conclusion",
    "closed_by_sweeper",
    "completed_received_at",
    "reported_completed_at",
    "reported_started_at",
    "placed_at",
    "tests_passed",
    "tests_failed",
    "tests_skipped",
    "tests_total",
    "failed_tests_truncated",
    "artifact_url",
    "environment",
    "triage_verdict",
    "queue_seconds",
    "execution_seconds",
    "timing_source",
    "updated_at",
)
# State only moves forward, in the statement itself: a completed job is never updated again,
# except one the sweeper closed (a late real completion replaces its timed_out). The last
# parameter is Job.Status.COMPLETED.
COMPLETE_JOB = (
    f"UPDATE hud_job SET {', '.join(f'{column} = %s' for column in COMPLETION_COLUMNS)}"
    " WHERE id = %s AND (status <> %s OR closed_by_sweeper)"
)


# A completed job's failed tests: on PostgreSQL one statement whatever their number (a column
# array per field), elsewhere one row per test through executemany.
FAILED_TEST_COLUMNS = ("job_id", "classname", "name", "message", "stacktrace", "duration")
INSERT_FAILED_TESTS_UNNEST = (
    f"INSERT INTO hud_failedtest ({', '.join(FAILED_TEST_COLUMNS)}) SELECT * FROM UNNEST("
    "%s::bigint[], %s::varchar[], %s::varchar[], %s::text[], %s::text[], %s::double precision[])"
)
INSERT_FAILED_TEST = (
    f"INSERT INTO hud_failedtest ({', '.join(FAILED_TEST_COLUMNS)})"
    f" VALUES ({', '.join(['%s'] * len(FAILED_TEST_COLUMNS))})"
)


def failed_test_columns(job_id: int, tests: Sequence[Any]) -> list[list[Any]]:
    """FAILED_TEST_COLUMNS' values, one list per column, for hud.core.payload.FailedTestData."""
    return [
        [job_id] * len(tests),
        [test.classname for test in tests],
        [test.name for test in tests],
        [test.message for test in tests],
        [test.stacktrace for test in tests],
        [test.duration for test in tests],
    ]


# --- Written-out reads ------------------------------------------------------------------------


def any_sql(column: str, values: Iterable) -> tuple[str, list]:
    """SQL of `column` being one of `values`, and its parameters: one array parameter on
    PostgreSQL (hud.models.lookups), a placeholder per value elsewhere."""
    values = list(values)
    if connection.vendor == "postgresql":
        return f"{column} = ANY(%s)", [values]
    return f"{column} IN ({', '.join(['%s'] * len(values))})", values


def statement_rows(statement: str, params: Sequence, *, utc: Collection[int] = ()) -> list[tuple]:
    """The rows of a written-out statement as the driver gives them. `utc`: the positions of
    datetime columns (a column of a table, not an expression), which SQLite's driver gives
    naive (the UTC Django stores): they get UTC attached, so they compare as a queryset's
    would."""
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
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


# --- Rows to model instances ---------------------------------------------------------------


def instance(model: type[ModelT], columns: Sequence[str], row: Sequence[Any]) -> ModelT:
    """A model instance from a row read by plain SQL, its values converted as the ORM would
    (JSON parsed; SQLite's naive datetimes, stored in UTC, made aware)."""
    fields = fields_by_column(model)
    database = connections[DEFAULT_DB_ALIAS]  # the wrapper itself, not the per-use proxy
    names, values = [], []
    for column, value in zip(columns, row, strict=True):
        field = fields[column]
        names.append(field.attname)
        values.append(_converted(field, value, database))
    return model.from_db(DEFAULT_DB_ALIAS, names, values)


@functools.cache
def fields_by_column(model: type[models.Model]) -> dict[str, models.Field]:
    return {field.column: field for field in model._meta.concrete_fields}


def _converted(field: models.Field, value: Any, database: Any) -> Any:
    if value is None:
        return None
    if isinstance(field, models.JSONField):
        return field.from_db_value(value, None, database)
    if isinstance(field, models.DateTimeField):
        return aware(value)
    return value


def aware(value: dt.datetime | None) -> dt.datetime | None:
    """A datetime read by plain SQL: SQLite gives it naive (stored in UTC), PostgreSQL aware."""
    return value.replace(tzinfo=dt.UTC) if value and value.tzinfo is None else value


def values(instance: models.Model, columns: Sequence[str]) -> list[Any]:
    """An instance's values for these columns, adapted for the database as the ORM would."""
    fields = fields_by_column(type(instance))
    database = connections[DEFAULT_DB_ALIAS]
    return [
        fields[column].get_db_prep_save(getattr(instance, fields[column].attname), database)
        for column in columns
    ]
