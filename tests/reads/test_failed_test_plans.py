"""What keeps failed-test reads probing only what a page or a verdict shows (issue 14,
migration 0014), as the migrated PostgreSQL schema holds it. The plans themselves are measured
on the heavy bench (`bench/pages.py`, docs/performance.md): a planner's choice depends on
table sizes a test cannot reach."""

import pytest
from django.db import connection

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's planner"),
]


def _one(sql: str) -> tuple:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()


def test_a_judged_jobs_tests_are_found_by_name_first():
    """Attribution's cross-commit read filters by name alone: an index led by classname left
    PostgreSQL scanning every failed test (26 → 1 ms on the heavy bench)."""
    (definition,) = _one(
        "SELECT indexdef FROM pg_indexes WHERE tablename = 'hud_failedtest'"
        " AND indexname = 'failedtest_test'"
    )
    assert definition.endswith("(name, classname)")


def test_the_planner_samples_enough_jobs_to_see_most_report_no_failed_tests():
    """A few jobs with hundreds of tests hid the long tail at the default sample: a backend's
    ranked failed tests hashed the whole table instead of probing its window (24 → 1 ms)."""
    (target,) = _one(
        "SELECT attstattarget FROM pg_attribute WHERE attrelid = 'hud_failedtest'::regclass"
        " AND attname = 'job_id'"
    )
    assert target == 1000
