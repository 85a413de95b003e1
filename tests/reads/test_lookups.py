"""`__any` (hud.models.lookups): the rows `__in` selects; on PostgreSQL the list is one array."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from hud.models import FailedTest, Job
from tests.api.test_exports import add_jobs
from tests.support import builders


@pytest.fixture
def jobs(db):
    add_jobs([builders.downstream("org/a"), builders.downstream("org/b")], 30)
    job_ids = list(Job.objects.order_by("id").values_list("id", flat=True))
    FailedTest.objects.bulk_create(
        FailedTest(job_id=job_id, classname="TestOps", name=f"test_{n}")
        for n, job_id in enumerate(job_ids[::3])
    )
    return job_ids


@pytest.mark.parametrize(
    "values",
    [
        lambda ids: ids[::4],
        lambda ids: [*ids[:5], *ids[:5], None],  # duplicates and a null, as `__in` takes them
        lambda ids: [None],
        lambda ids: [],
        lambda ids: [10**12],
    ],
)
def test_any_selects_what_in_selects(jobs, values):
    wanted = values(jobs)
    for field in ("id", "run_id"):
        assert list(Job.objects.filter(**{f"{field}__any": wanted}).order_by("id")) == list(
            Job.objects.filter(**{f"{field}__in": wanted}).order_by("id")
        )
    # A foreign key, by its target's values.
    assert set(FailedTest.objects.filter(job_id__any=wanted)) == set(
        FailedTest.objects.filter(job_id__in=wanted)
    )


def test_strings_and_a_queryset(jobs):
    shas = list(Job.objects.values_list("head_sha", flat=True)[:7])
    assert Job.objects.filter(head_sha__any=shas).count() == 7
    failing = Job.objects.filter(conclusion="failure").values("id")
    assert set(FailedTest.objects.filter(job_id__any=failing)) == set(
        FailedTest.objects.filter(job_id__in=failing)
    )


def test_the_list_is_one_parameter_on_postgresql(jobs):
    with CaptureQueriesContext(connection) as captured:
        list(Job.objects.filter(id__any=jobs, downstream__full_name="org/a"))
    sql = captured.captured_queries[0]["sql"]
    if connection.vendor == "postgresql":
        assert "= ANY(" in sql and " IN (" not in sql
    else:
        assert " IN (" in sql


def test_a_queryset_is_probed_as_an_array_on_postgresql(jobs):
    """A queryset runs once as an array (`= ANY(ARRAY(…))`) rather than as `IN (subquery)`,
    which PostgreSQL may plan as a join hashing every failed test stored."""
    window = Job.objects.filter(downstream__full_name="org/a").values("id")
    with CaptureQueriesContext(connection) as captured:
        found = set(FailedTest.objects.filter(job_id__any=window))
    sql = captured.captured_queries[0]["sql"]
    assert found == set(FailedTest.objects.filter(job__downstream__full_name="org/a"))
    assert found  # the fixture gave org/a failed tests
    if connection.vendor == "postgresql":
        assert "= ANY(ARRAY(SELECT" in sql and " IN (" not in sql
    else:
        assert " IN (SELECT" in sql
