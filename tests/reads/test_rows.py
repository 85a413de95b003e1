"""`hud.reads.rows.driver_rows`: a queryset's rows as the driver gives them, with the datetime
columns named in `utc` as Django gives them on either database (aware, in UTC)."""

import datetime as dt

import pytest
from django.db.models import Case, IntegerField, Value, When

from hud.models import Job
from hud.reads.rows import driver_rows
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
