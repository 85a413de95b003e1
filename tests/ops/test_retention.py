"""`manage.py prune`: failed-test details and raw bodies go, job rows and statistics stay."""

import datetime as dt
import io

import pandas as pd
import pytest
from django.core.management import CommandError, call_command

from hud import stats
from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import Delivery, FailedTest, Job, Level
from hud.ops import retention
from hud.reads import selectors
from tests.support import builders

pytestmark = pytest.mark.django_db
REPO = "org/repo"
DAYS = 60
KEEP = 30


@pytest.fixture
def history(frozen_clock):
    """Sixty days of one job a day (every third failing with two failed tests) and deliveries."""
    backend = builders.downstream(REPO, Level.L2)
    now = frozen_clock()
    for day in range(DAYS):
        at = now - dt.timedelta(days=DAYS - day, hours=-1)
        frozen_clock.set(at)
        failing = day % 3 == 0
        body = builders.callback_body(
            REPO,
            status="completed",
            conclusion="failure" if failing else "success",
            delivery_id=f"delivery-{day}",
            payload=builders.pr_payload(number=day + 1, sha=f"{day:040x}"),
            run_id=1000 + day,
            failed_tests=[
                {"name": f"test_{n}", "classname": "TestOps", "message": "boom", "stacktrace": "x"}
                for n in range(2)
            ]
            if failing
            else [],
        )
        ingest.store(backend, parse_callback(body, REPO), source=Job.Source.CALLBACK)
        delivery = builders.delivery(f"delivery-{day}", number=day + 1, sha=f"{day:040x}")
        delivery.payload = {"action": "synchronize", "number": day + 1}
        delivery.save(update_fields=["payload"])
    frozen_clock.set(now)
    return backend


def _summary(start: dt.datetime, end: dt.datetime, now: dt.datetime) -> tuple[pd.DataFrame, str]:
    frame = selectors.jobs_frame(start, end)
    return frame, repr(stats.backend_summary(frame, start, end, now))


def test_prune_keeps_job_rows_and_statistics_over_the_kept_period(history, frozen_clock):
    now = frozen_clock()
    cutoff = retention.cutoff_for(KEEP)
    kept_start, all_start = now - dt.timedelta(days=KEEP), now - dt.timedelta(days=DAYS + 1)
    before_kept = _summary(kept_start, now, now)
    before_all = _summary(all_start, now, now)
    jobs_before = list(Job.objects.order_by("id").values())
    old_tests = FailedTest.objects.filter(job__placed_at__lt=cutoff).count()
    new_tests = FailedTest.objects.filter(job__placed_at__gte=cutoff).count()
    assert old_tests == 20 and new_tests == 20

    report = retention.prune(cutoff, batch_size=3)

    assert (report.failed_tests, report.payloads) == (old_tests, 30)
    assert FailedTest.objects.count() == new_tests
    assert not FailedTest.objects.filter(job__placed_at__lt=cutoff).exists()
    assert list(Job.objects.order_by("id").values()) == jobs_before
    assert Delivery.objects.filter(payload__isnull=True).count() == 30
    assert not Delivery.objects.filter(received_at__gte=cutoff, payload__isnull=True).exists()
    after_kept = _summary(kept_start, now, now)
    pd.testing.assert_frame_equal(after_kept[0], before_kept[0])
    assert after_kept[1] == before_kept[1]
    # Statistics only ever read job rows, so even the pruned period reads the same.
    assert _summary(all_start, now, now)[1] == before_all[1]


def test_a_second_prune_finds_nothing(history):
    cutoff = retention.cutoff_for(KEEP)
    retention.prune(cutoff)
    again = retention.prune(cutoff)
    assert (again.failed_tests, again.payloads) == (0, 0)


def test_dry_run_reports_and_removes_nothing(history):
    out = io.StringIO()
    call_command("prune", "--older-than", str(KEEP), "--dry-run", stdout=out, stderr=io.StringIO())
    assert "would remove 20 failed-test row(s)" in out.getvalue()
    assert "would remove 30 raw delivery payload(s)" in out.getvalue()
    assert FailedTest.objects.count() == 40
    assert not Delivery.objects.filter(payload__isnull=True).exists()


def test_the_command_prunes_in_batches_with_a_progress_bar(history):
    out, err = io.StringIO(), io.StringIO()
    call_command("prune", "--older-than", str(KEEP), "--batch-size", "7", stdout=out, stderr=err)
    assert "removed 20 failed-test row(s)" in out.getvalue()
    assert "removed 30 raw delivery payload(s)" in out.getvalue()
    assert "failed tests: 100%" in err.getvalue() and "20/20" in err.getvalue()
    assert "payloads: 100%" in err.getvalue()
    assert FailedTest.objects.count() == 20
    assert Job.objects.count() == DAYS


@pytest.mark.parametrize(
    "args", [["--older-than", "0"], ["--older-than", "30", "--batch-size", "0"]]
)
def test_the_command_refuses_nonsense(args, db):
    with pytest.raises(CommandError):
        call_command("prune", *args, stdout=io.StringIO())
