"""The callback path's plain statements (hud.models.sql) agree with the models and the ORM."""

import datetime as dt

import pytest
from django.db import connection, connections

from hud import levels
from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import Downstream, FailedTest, Job, Level, sql
from tests.support import builders

pytestmark = pytest.mark.django_db


def columns(model, *, key: bool) -> tuple[str, ...]:
    return tuple(f.column for f in model._meta.concrete_fields if key or not f.primary_key)


def test_job_columns_are_every_field_but_the_key_in_model_order():
    assert columns(Job, key=False) == sql.JOB_COLUMNS


def test_downstream_columns_are_every_field():
    assert columns(Downstream, key=True) == sql.DOWNSTREAM_COLUMNS


def test_failed_test_columns_are_every_field_but_the_key():
    assert columns(FailedTest, key=False) == sql.FAILED_TEST_COLUMNS


def test_completion_columns_are_job_columns_without_the_row_key():
    assert set(sql.COMPLETION_COLUMNS) <= set(sql.JOB_COLUMNS)
    assert not {"downstream_id", "delivery_id", "workflow_name", "job_name", "check_run_id"} & set(
        sql.COMPLETION_COLUMNS
    )


def orm_values(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def stored(backend, body) -> Job:
    data = parse_callback(body, backend.full_name)
    outcome = ingest.store(backend, data, source=Job.Source.CALLBACK)
    assert outcome.status in {"created", "updated"}
    return data


def test_a_job_written_and_read_by_the_statements_equals_the_orm_row(frozen_clock):
    backend = builders.downstream("org/repo", Level.L2)
    delivery = builders.delivery("delivery-1")
    builders.dispatch(delivery, backend, at=frozen_clock() - dt.timedelta(minutes=3))
    stored(backend, builders.callback_body(delivery_id="delivery-1"))
    frozen_clock.advance(minutes=10)
    verdict = {"schema_version": "1", "category": "infra", "confidence": "low", "summary": "x"}
    data = stored(
        backend,
        builders.callback_body(
            delivery_id="delivery-1",
            status="completed",
            conclusion="failure",
            environment={"runner": "gpu-1", "nested": {"driver": "550"}},
            triage_verdict=verdict,
            test_results={"passed": "8", "failed": "2", "skipped": "0", "total": "10"},
            failed_tests=[
                {"classname": "TestOps", "name": "test_add", "message": "boom", "duration": 0.5},
                {"name": "test_mul", "stacktrace": "Traceback …\n  line 3"},
            ],
        ),
    )

    with connection.cursor() as cursor:
        cursor.execute(
            sql.lock_job(connection.features.has_select_for_update),
            (backend.id, data.delivery_id, data.workflow_name, data.job_name, data.check_run_id),
        )
        read = sql.instance(Job, ("id", *sql.JOB_COLUMNS), cursor.fetchone())

    orm = Job.objects.get()
    assert orm_values(read) == orm_values(orm)
    # What the statements wrote is what the callbacks said, with server timing.
    assert orm.environment == {"runner": "gpu-1", "nested": {"driver": "550"}}
    assert orm.triage_verdict["category"] == "infra"
    assert orm.queue_seconds == 180.0
    assert orm.execution_seconds == 600.0
    assert orm.dispatch.delivery == delivery
    assert orm.completed_received_at == frozen_clock()
    assert (orm.tests_passed, orm.tests_failed, orm.tests_total) == (8, 2, 10)
    stored_tests = FailedTest.objects.filter(job=orm).order_by("name")
    assert [(t.classname, t.name, t.message, t.stacktrace, t.duration) for t in stored_tests] == [
        ("TestOps", "test_add", "boom", "", 0.5),
        ("", "test_mul", "", "Traceback …\n  line 3", None),
    ]


def test_the_completion_statement_never_updates_a_job_already_completed(frozen_clock):
    """The forward-only guard is in the SQL: COMPLETE_JOB leaves a completed job as it is."""
    backend = builders.downstream("org/repo", Level.L2)
    delivery = builders.delivery("delivery-1")
    builders.dispatch(delivery, backend, at=frozen_clock() - dt.timedelta(minutes=3))
    stored(
        backend,
        builders.callback_body(delivery_id="delivery-1", status="completed", conclusion="success"),
    )
    job = Job.objects.get()
    before = orm_values(job)
    job.conclusion = "failure"
    job.status = Job.Status.IN_PROGRESS
    with connection.cursor() as cursor:
        cursor.execute(
            sql.COMPLETE_JOB,
            [*sql.values(job, sql.COMPLETION_COLUMNS), job.id, Job.Status.COMPLETED],
        )
        assert cursor.rowcount == 0
    assert orm_values(Job.objects.get()) == before


def test_find_downstream_reads_every_field_as_the_orm_does(frozen_clock):
    created = builders.downstream("Org/Repo", Level.L3, oncalls=["alice", "bob"], device="npu")

    found = levels.find_downstream("org/REPO")

    assert orm_values(found) == orm_values(Downstream.objects.get(pk=created.pk))
    assert found.oncalls == ["alice", "bob"]
    assert found.created_at.tzinfo is not None


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL prepares statements")
def test_postgresql_prepares_the_statements_a_connection_runs_often(frozen_clock):
    backend = builders.downstream("org/repo", Level.L2)
    for _ in range(6):
        levels.find_downstream(backend.full_name)

    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any("FROM hud_downstream WHERE LOWER(full_name)" in text for text in prepared)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL prepares statements")
def test_prepared_statements_are_planned_for_their_own_parameters(db):
    """A generic plan, one for every window and set of backends, slowed the windowed reads
    1.4-1.9x once their statements were prepared: every connection plans each execution."""
    fresh = connections.create_connection("default")
    try:
        with fresh.cursor() as cursor:
            cursor.execute("SHOW plan_cache_mode")
            assert cursor.fetchone()[0] == "force_custom_plan"
    finally:
        fresh.close()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's timestamptz loader")
def test_timestamps_decode_through_the_compiled_loader_to_the_values_djangos_gives(db):
    """Django's loader (pure Python, 2.7 µs a value) is replaced on every new connection by
    psycopg's compiled one, with the same values and the same tzinfo (called directly when
    the session is in Django's time zone, its values given Django's tzinfo otherwise)."""
    fresh = connections.create_connection("default")
    literals = [
        "2026-12-01 12:34:56.789012+00",
        "1969-07-20 20:17:40+00",
        "2026-03-29 01:30:00+02",
        "9999-12-31 23:59:59.999999+00",
    ]
    utc = dt.UTC
    expected = [
        dt.datetime(2026, 12, 1, 12, 34, 56, 789012, tzinfo=utc),
        dt.datetime(1969, 7, 20, 20, 17, 40, tzinfo=utc),
        dt.datetime(2026, 3, 28, 23, 30, tzinfo=utc),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=utc),
    ]
    try:
        with fresh.cursor() as cursor:
            cursor.execute("SELECT value::timestamptz FROM unnest(%s::text[]) AS value", [literals])
            values = [row[0] for row in cursor.fetchall()]
            loader = cursor.cursor.adapters.get_loader(1184, 0)  # timestamptz, text format
        assert values == expected
        assert all(value.tzinfo is fresh.timezone for value in values)
        assert loader.__name__ == "CompiledTzLoader"
        # A session in another time zone: the same instants, still with Django's tzinfo.
        with fresh.cursor() as cursor:
            cursor.execute("SET TIME ZONE 'America/New_York'")
            cursor.execute("SELECT value::timestamptz FROM unnest(%s::text[]) AS value", [literals])
            values = [row[0] for row in cursor.fetchall()]
        assert values == expected
        assert all(value.tzinfo is fresh.timezone for value in values)
    finally:
        fresh.close()
