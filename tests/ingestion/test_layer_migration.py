"""Migrating a database with stored attempts fills the derived layer's newest columns.

On PostgreSQL the fill leaves deferred foreign-key checks pending in its transaction, where a
later ALTER TABLE is refused: the column is made required by a migration of its own. This
test migrates a database holding attempts (a re-run that turned a failure into a success)
from before those columns to the latest state, and reads what the fill derived.
"""

import datetime as dt

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from hud.models import Job, Level, LogicalJob
from tests.conftest import NOW
from tests.support import builders

BEFORE = ("hud", "0008_logicaljob_downstream_no_own_index")


def _attempt(backend, attempt: int, conclusion: str, at: dt.datetime) -> None:
    Job.objects.create(
        downstream=backend,
        delivery_id=f"delivery-{attempt}",
        workflow_name="crcr",
        job_name="test-ops",
        check_run_id=f"555-{attempt}",
        event_type="pull_request",
        pr_number=1234,
        head_sha=builders.HEAD_SHA,
        source="callback",
        run_id=555,
        run_attempt=attempt,
        workflow_url="https://github.com/org/repo/actions/runs/555",
        status="completed",
        conclusion=conclusion,
        placed_at=at,
        updated_at=at,
    )


@pytest.mark.django_db(transaction=True)
def test_migrating_stored_attempts_fills_the_flakiness_and_last_row_columns():
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    try:
        backend = builders.downstream("org/repo", Level.L2)
        _attempt(backend, 1, "failure", NOW)
        _attempt(backend, 2, "success", NOW + dt.timedelta(hours=1))
        call_command("migrate", "hud", verbosity=0)
        job = LogicalJob.objects.get()
        assert (job.outcome, job.first_outcome, job.attempts) == ("success", "failure", 2)
        assert (job.flake_eligible, job.flaky) == (True, True)
        assert job.last_placed_at == NOW + dt.timedelta(hours=1)
    finally:
        call_command("migrate", "hud", verbosity=0)
