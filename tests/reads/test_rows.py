"""`hud.reads.rows`: a queryset's rows as the driver gives them, with the datetime columns named
in `utc` as Django gives them on either database (aware, in UTC); float columns per group
of a written-out statement."""

import datetime as dt
import math
from collections import defaultdict

import pytest
from django.db.models import Case, F, IntegerField, Value, When

from hud.models import Job
from hud.reads.rows import driver_rows, float_groups
from tests.api.test_exports import add_jobs
from tests.support import builders


@pytest.mark.django_db
def test_utc_columns_compare_as_the_querysets_do():
    add_jobs([builders.downstream("org/a"), builders.downstream("org/b")], 12)
    failed = Case(When(conclusion="failure", then=Value(1)), default=Value(0),
                  output_field=IntegerField())  # fmt: skip
    read = (
        Job.objects.annotate(failed=failed)
        .order_by("id")
        .values_list("id", "placed_at", "completed_received_at", "failed")
    )
    rows = driver_rows(read, utc=[1, 2])
    assert rows == list(read)  # nulls included (the in-progress rows' completed_received_at)
    assert all(row[1].utcoffset() == dt.timedelta(0) for row in rows)
    assert any(row[2] is None for row in rows) and any(row[3] == 1 for row in rows)


@pytest.mark.django_db
def test_float_groups_keep_each_rows_values_together_with_nulls_as_nan():
    add_jobs([builders.downstream("org/a"), builders.downstream("org/b")], 40)
    # Queue seconds missing where execution is known, and values no other row has.
    Job.objects.filter(id__gt=0).update(execution_seconds=F("id") * 1.25)
    Job.objects.filter(run_id__in=[3, 7, 11]).update(queue_seconds=None)
    Job.objects.filter(run_id=13).update(execution_seconds=None)
    rows = Job.objects.filter(status="completed")

    # A key may be an expression with parameters of its own, before the source's.
    groups = float_groups(
        ["downstream_id", "event_type", "CASE WHEN run_id > %s THEN 1 ELSE 0 END"],
        ["queue_seconds", "execution_seconds"],
        f"FROM {Job._meta.db_table} WHERE status = %s",
        ["completed"],
        [20],
    )

    expected = defaultdict(list)
    for *key, run_id, queue, execution in rows.values_list(
        "downstream_id", "event_type", "run_id", "queue_seconds", "execution_seconds"
    ):
        expected[(*key, int(run_id > 20))].append((queue, execution))
    assert set(groups) == set(expected)
    for key, (queue, execution) in groups.items():
        assert queue.dtype == execution.dtype == "float64"
        pairs = [
            tuple(None if math.isnan(value) else value for value in pair)
            for pair in zip(queue.tolist(), execution.tolist(), strict=True)
        ]
        assert sorted(pairs, key=repr) == sorted(expected[key], key=repr)
    assert any(None in pair for pairs in expected.values() for pair in pairs)
