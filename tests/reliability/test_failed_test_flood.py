"""The flood case of issue 14: one backend's failed tests cannot break anyone's pages.

70 callbacks of 1,000 distinct failed-test names each (every one within the size caps), from one
L2 backend on one PR, put 70,000 distinct names behind that PR. Every look-up that turned a set
of names or ids built in Python into `__in=` parameters outgrew SQLite's 32,766 (and
PostgreSQL's 65,535) bound parameters: the PR's page and API, the commit's page and API, the
backend's pages and the daily gate evaluation of every backend answered 500 or raised, and
`run_periodic` exited. Run it on both databases (docs/performance.md).
"""

import datetime as dt
import io

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client

from hud import promotion
from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import FailedTest, Job, Level
from tests import promotion as promotion_helpers
from tests.conftest import NOW
from tests.support import builders

pytestmark = pytest.mark.django_db(transaction=False)

CALLBACKS = 70
TESTS_PER_CALLBACK = 1000
PR = 424_242
HEAD = "f1" * 20
REPO = "flood/accel"


def _flood(frozen_clock) -> None:
    """One real callback through ingest.store, then the other 69 as bulk copies of its rows."""
    since = NOW - dt.timedelta(days=60)
    backend = promotion_helpers.backend(REPO, Level.L2, since=since)
    promotion_helpers.backend("calm/accel", Level.L2, since=since)
    at = NOW - dt.timedelta(hours=20)
    frozen_clock.set(at)
    body = builders.callback_body(
        REPO,
        status="completed",
        conclusion="failure",
        delivery_id=f"d-{PR}",
        payload=builders.pr_payload(PR, HEAD),
        run_id=7_000_000,
        job_name="test-flood-0",
        failed_tests=[
            {"name": f"test_c0_{i}", "classname": "TestFlood", "message": "boom"}
            for i in range(TESTS_PER_CALLBACK)
        ],
    )
    first = ingest.store(backend, parse_callback(body, REPO), source=Job.Source.CALLBACK).job_id
    template = Job.objects.get(pk=first)
    for index in range(1, CALLBACKS):
        template.pk = None
        template.job_name = f"test-flood-{index}"
        template.run_id = 7_000_000 + index
        template.check_run_id = f"{template.run_id}-1"
        template.save(force_insert=True)
        FailedTest.objects.bulk_create(
            [
                FailedTest(job=template, classname="TestFlood", name=f"test_c{index}_{i}")
                for i in range(TESTS_PER_CALLBACK)
            ],
            batch_size=500,
        )
    call_command("rebuild_derived", "--no-progress", stdout=io.StringIO())
    if connection.vendor == "postgresql":
        # What autovacuum does after a bulk load, which it cannot see inside the test's
        # transaction: without it the planner may plan 70,000 rows on an earlier test's
        # statistics of near-empty tables (a page then took more than 300 s in the suite).
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE hud_job, hud_failedtest, hud_logicaljob")
    frozen_clock.set(NOW)


@pytest.fixture
def flood(frozen_clock):
    _flood(frozen_clock)
    assert FailedTest.objects.count() == CALLBACKS * TESTS_PER_CALLBACK
    return frozen_clock


URLS = [
    f"/crcr/pr/{PR}",
    f"/api/v1/prs/{PR}",
    f"/crcr/commit/{HEAD}",
    f"/api/v1/commits/{HEAD}",
    f"/crcr/{REPO}",
    f"/crcr/{REPO}/tests",
    f"/api/v1/backends/{REPO}/tests",
    f"/api/v1/backends/{REPO}/",
    f"/api/v1/backends/{REPO}/gates",
    "/crcr",
]


# SQLite's oldest default: no query may bind more, whatever sits behind a page.
MAX_PARAMETERS = 999


class _Widest:
    """The most parameters any one query bound while installed."""

    def __init__(self) -> None:
        self.most = 0

    def __call__(self, execute, sql, params, many, context):
        self.most = max(self.most, len(params or ()))
        return execute(sql, params, many, context)


def _widest(action) -> tuple[object, int]:
    widest = _Widest()
    with connection.execute_wrapper(widest):
        result = action()
    return result, widest.most


@pytest.mark.timeout(600)  # ~50 s alone on PostgreSQL; ten flooded pages under a busy suite
def test_pages_of_the_flooded_pr_commit_and_backend_answer(flood):
    client = Client(raise_request_exception=False)
    answers = {url: _widest(lambda url=url: client.get(url).status_code) for url in URLS}
    assert answers == {url: (200, answers[url][1]) for url in URLS}
    assert {url: most for url, (_, most) in answers.items() if most > MAX_PARAMETERS} == {}


def test_daily_gate_evaluation_of_every_backend_completes(flood):
    result, most = _widest(promotion.daily_evaluation)
    assert result == {"evaluated": 2, "warnings": 0, "failed": 0}
    assert most <= MAX_PARAMETERS


def test_run_periodic_completes(flood, capsys):
    call_command("run_periodic")
    assert "daily_evaluation: {'evaluated': 2" in capsys.readouterr().out
