"""hud.ingestion.derived: kept at write time, equal to a rebuild from the attempts."""

import datetime as dt
import io

import pandas as pd
import pytest
from django.core.management import call_command
from django.db import connection, transaction
from hypothesis import given
from hypothesis import strategies as st

from hud import stats
from hud.core import clock
from hud.core.payload import parse_callback
from hud.ingestion import derived, ingest
from hud.models import DailyRollup, Job, Level, LogicalJob
from hud.reads import rollups, selectors
from tests.conftest import NOW
from tests.ingestion.test_concurrency import THREADS, race
from tests.support import builders

REPO = "org/repo"
SHA_A, SHA_B = "a" * 40, "b" * 40


@pytest.fixture
def backend(db):
    """An L2 backend."""
    return builders.downstream(REPO, Level.L2)


def report(
    backend,
    status: str = "in_progress",
    conclusion: str | None = None,
    *,
    sha: str = SHA_A,
    pr: int = 7,
    event_type: str = "pull_request",
    **fields,
) -> ingest.Outcome:
    """Store a live callback for a PR head (no stored delivery: the body decides)."""
    payload = builders.pr_payload(pr, sha) if event_type == "pull_request" else {"after": sha}
    body = builders.callback_body(
        REPO,
        status=status,
        conclusion=conclusion,
        delivery_id=f"delivery-{event_type}-{pr}-{sha[:4]}",
        payload=payload,
        event_type=event_type,
        **fields,
    )
    return ingest.store(backend, parse_callback(body, REPO), source=Job.Source.CALLBACK)


def rollup_rows() -> list[dict]:
    """Every rollup row with a count, as plain dicts (all-zero rows mean nothing)."""
    rows = DailyRollup.objects.order_by("downstream_id", "event_type", "day").values(
        "downstream_id", "event_type", "day", *derived.ROLLUP_FIELDS
    )
    return [row for row in rows if any(row[field] for field in derived.ROLLUP_FIELDS)]


def logical_rows() -> list[dict]:
    """Every logical job row as a plain dict, without its database id."""
    rows = LogicalJob.objects.order_by(*derived.KEY_COLUMNS).values()
    return [{k: v for k, v in row.items() if k != "id"} for row in rows]


def snapshot() -> tuple[list[dict], list[dict]]:
    """The whole derived layer."""
    return logical_rows(), rollup_rows()


def rebuild() -> None:
    """`manage.py rebuild_derived` without its progress bar."""
    call_command("rebuild_derived", "--no-progress", stdout=io.StringIO())


def the_rollup() -> DailyRollup:
    """The one rollup row of the test's day."""
    return DailyRollup.objects.get(day=NOW.date())


def test_rollup_model_has_exactly_the_fields_the_writer_counts():
    # Besides its key, a row holds the counts and how many writes changed it.
    not_counted = ("id", "day", "revision")
    counted = [f.column for f in DailyRollup._meta.concrete_fields if f.name not in not_counted]
    assert counted[2:] == list(derived.ROLLUP_FIELDS)


def test_each_write_that_changes_a_rollup_row_raises_its_revision(backend, frozen_clock):
    report(backend)
    assert the_rollup().revision == 1
    frozen_clock.advance(minutes=10)
    report(backend, "completed", "success")
    assert the_rollup().revision == 2
    # A duplicate changes no count, so the row and its revision stay.
    report(backend, "completed", "success")
    assert the_rollup().revision == 2


def test_in_progress_callback_creates_an_excluded_logical_job(backend, frozen_clock):
    started = report(backend)

    job = LogicalJob.objects.get()
    assert job.latest_job_id == started.job_id
    assert (job.latest_status, job.outcome, job.attempts) == ("in_progress", "excluded", 1)
    assert (the_rollup().excluded, the_rollup().completed_jobs) == (1, 0)


def test_completion_moves_the_job_to_its_class_and_times_it(backend, frozen_clock):
    report(backend)
    frozen_clock.advance(minutes=10)
    report(backend, "completed", "failure", failed_tests=[{"name": "test_a"}, {"name": "test_b"}])

    job = LogicalJob.objects.get()
    assert (job.outcome, job.first_outcome, job.failed_tests) == ("failure", "failure", 2)
    assert job.execution_seconds == 600.0
    rollup = the_rollup()
    assert (rollup.excluded, rollup.failure, rollup.completed_jobs) == (0, 1, 1)
    assert (rollup.runs, rollup.execution_n, rollup.execution_ms) == (1, 1, 600_000)
    assert rollup.failed_tests == 2


def test_rerun_latest_attempt_wins_and_first_attempt_is_kept(backend, frozen_clock):
    report(backend, "completed", "failure", run_attempt=1)
    report(backend, "completed", "success", run_attempt=2)

    job = LogicalJob.objects.get()
    assert (job.outcome, job.first_outcome, job.attempts, job.reruns) == (
        "success",
        "failure",
        2,
        1,
    )
    rollup = the_rollup()
    assert (rollup.success, rollup.failure, rollup.first_success, rollup.first_counted) == (
        1,
        0,
        0,
        1,
    )
    assert (rollup.rerun_jobs, rollup.runs, rollup.completed_attempts) == (1, 2, 2)


def test_late_first_attempt_does_not_replace_the_latest(backend, frozen_clock):
    report(backend, "completed", "success", run_attempt=2)
    report(backend, "completed", "failure", run_attempt=1)

    job = LogicalJob.objects.get()
    assert (job.outcome, job.first_outcome) == ("success", "failure")
    assert job.latest_job.run_attempt == 2


def test_sweeper_timeout_then_real_result_replaces_it(backend, frozen_clock, settings):
    report(backend)
    frozen_clock.advance(seconds=settings.CRCR_ZOMBIE_TIMEOUT_SECONDS + 1)
    ingest.sweep_zombies()

    swept = LogicalJob.objects.get()
    assert (swept.outcome, swept.closed_by_sweeper) == ("timed_out", True)
    assert (the_rollup().timed_out, the_rollup().overrun, the_rollup().overrun_known) == (1, 1, 1)

    report(backend, "completed", "success")

    job = LogicalJob.objects.get()
    assert (job.outcome, job.closed_by_sweeper) == ("success", False)
    day = DailyRollup.objects.get(day=frozen_clock().date())
    assert (day.success, day.timed_out) == (1, 0)
    kept = snapshot()
    rebuild()
    assert snapshot() == kept


def test_superseding_push_turns_an_older_cancel_into_superseded(backend, frozen_clock):
    report(backend, "completed", "cancelled", sha=SHA_A)
    assert the_rollup().cancelled == 1
    frozen_clock.advance(minutes=5)

    report(backend, sha=SHA_B)

    old = LogicalJob.objects.get(head_sha=SHA_A)
    assert (old.outcome, old.first_outcome) == ("superseded", "superseded")
    rollup = the_rollup()
    assert (rollup.cancelled, rollup.superseded, rollup.first_counted) == (0, 1, 0)


def test_cancel_of_the_newest_head_is_not_superseded(backend, frozen_clock):
    report(backend, "completed", "success", sha=SHA_A)
    frozen_clock.advance(minutes=5)
    report(backend, "completed", "cancelled", sha=SHA_B)

    assert LogicalJob.objects.get(head_sha=SHA_B).outcome == "cancelled"


def test_duplicate_and_conflicting_callbacks_leave_the_layer_unchanged(backend, frozen_clock):
    report(backend, "completed", "failure")
    before = snapshot()

    report(backend, "completed", "failure")
    with pytest.raises(ingest.Rejected):
        report(backend, "completed", "success")

    assert snapshot() == before


def _forward_completed_on(day: str, source: str) -> DailyRollup:
    body = builders.callback_body(REPO, status="completed", conclusion="success")
    body["workflow"]["completed_at"] = f"{day}T08:00:00Z"
    ingest.receive_forward(builders.forward_body(body, REPO), source=source)
    return DailyRollup.objects.get()


def test_import_places_the_job_on_its_reported_day(backend, frozen_clock):
    rollup = _forward_completed_on("2026-10-01", Job.Source.IMPORT)

    assert rollup.day == dt.date(2026, 10, 1)
    assert (rollup.success, rollup.queue_ms, rollup.end_to_end_ms) == (1, 60_000, 660_000)


def test_live_forward_counts_on_its_day_of_receipt(backend, frozen_clock):
    # A live forward's reported time is untrusted: a backdated one must not fill past days.
    rollup = _forward_completed_on("2026-10-01", Job.Source.FORWARD)

    assert rollup.day == NOW.date()
    assert (rollup.success, rollup.queue_ms, rollup.end_to_end_ms) == (1, 60_000, 660_000)


def test_rebuild_derived_recomputes_a_deleted_layer(backend, frozen_clock):
    report(backend, "completed", "failure", run_attempt=1)
    report(backend, "completed", "success", run_attempt=2)
    report(backend, "completed", "cancelled", sha=SHA_B, job_name="other")
    kept = snapshot()
    LogicalJob.objects.all().delete()
    DailyRollup.objects.all().delete()

    out = io.StringIO()
    call_command("rebuild_derived", "--no-progress", stdout=out)

    assert snapshot() == kept
    assert "rebuilt 2 logical jobs from 3 attempts" in out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_concurrent_callbacks_of_one_pr_keep_the_rollup_exact(frozen_clock):
    backend = builders.downstream(REPO, Level.L2)
    report(backend, "completed", "cancelled", sha=SHA_A, job_name="old")
    frozen_clock.advance(minutes=1)
    bodies = iter(
        [
            builders.callback_body(
                REPO,
                status="completed",
                conclusion=("success", "failure")[index % 2],
                delivery_id=f"delivery-{index % 2}",
                payload=builders.pr_payload(7, (SHA_A, SHA_B)[index % 2]),
                job_name=f"job-{index}",
            )
            for index in range(THREADS)
        ]
    )
    outcomes = race(
        lambda: ingest.store(backend, parse_callback(next(bodies), REPO), source="callback")
    )

    assert [getattr(o, "status", repr(o)) for o in outcomes] == ["created"] * THREADS
    rollup = the_rollup()
    assert (rollup.success, rollup.failure, rollup.superseded) == (4, 4, 1)
    kept = snapshot()
    rebuild()
    assert snapshot() == kept


# --------------------------------------------------------------------------- property

CONCLUSIONS = ["success", "failure", "cancelled", "cancelled", "timed_out", "skipped"]
callbacks = st.fixed_dictionaries(
    {
        "kind": st.just("callback"),
        "sha": st.sampled_from([SHA_A, SHA_B]),
        "pr": st.sampled_from([7, 7, 8]),
        "event_type": st.sampled_from(["pull_request", "pull_request", "push"]),
        "job_name": st.sampled_from(["build", "test"]),
        "run_attempt": st.integers(1, 2),
        "completed": st.sampled_from([True, True, False]),
        "conclusion": st.sampled_from(CONCLUSIONS),
        "failed": st.integers(0, 2),
    }
)
steps = st.one_of(
    callbacks,
    callbacks,
    callbacks,
    st.fixed_dictionaries({"kind": st.just("wait"), "minutes": st.sampled_from([1, 30, 400])}),
    st.fixed_dictionaries({"kind": st.just("sweep")}),
)


def _play(backend, step: dict, moving: clock.MovableClock) -> None:
    if step["kind"] == "wait":
        moving.advance(minutes=step["minutes"])
    elif step["kind"] == "sweep":
        ingest.sweep_zombies()
    else:
        moving.advance(seconds=1)  # callbacks arrive one after another
        status = "completed" if step["completed"] else "in_progress"
        tests = [{"name": f"test_{i}"} for i in range(step["failed"])]
        try:
            report(
                backend,
                status,
                step["conclusion"],
                sha=step["sha"],
                pr=step["pr"],
                event_type=step["event_type"],
                job_name=step["job_name"],
                run_attempt=step["run_attempt"],
                **({"failed_tests": tests} if status == "completed" else {}),
            )
        except ingest.Rejected as refused:  # a conflicting completion changes nothing
            assert refused.http_status == 409


def _stats_outcomes() -> dict[tuple, tuple[str, str]]:
    """Today's classification (hud.stats over every attempt): latest and first per logical job."""
    frame = selectors.jobs_frame(NOW - dt.timedelta(days=30), NOW + dt.timedelta(days=30))
    prepared = stats.prepare(frame)
    key = stats.LOGICAL_JOB_KEY
    firsts = {tuple(row[key]): row["outcome"] for _, row in prepared.first.iterrows()}
    return {
        tuple(row[key]): (row["outcome"], firsts[tuple(row[key])])
        for _, row in prepared.latest.iterrows()
    }


@pytest.mark.django_db
@given(st.lists(steps, min_size=12, max_size=40))
def test_incremental_layer_equals_the_rebuilt_one(script):
    with clock.frozen_at(NOW) as moving, transaction.atomic():
        backend = builders.downstream(REPO, Level.L2)
        for step in script:
            _play(backend, step, moving)
        kept = snapshot()

        with connection.cursor() as cursor, connection.chunked_cursor() as stream:
            derived.rebuild(cursor, stream, connection.vendor)
        assert snapshot() == kept
        classes = {
            (REPO, *(row[k] for k in derived.KEY_COLUMNS[1:])): (
                row["outcome"],
                row["first_outcome"],
            )
            for row in kept[0]
        }
        assert classes == _stats_outcomes()
        transaction.set_rollback(True)


def test_daily_series_from_rollups_equals_the_one_from_attempts(backend, frozen_clock):
    report(backend, sha=SHA_A)
    frozen_clock.advance(minutes=10)
    report(backend, "completed", "cancelled", sha=SHA_A)
    report(backend, "completed", "failure", sha=SHA_B, job_name="lint", run_attempt=1)
    frozen_clock.advance(days=1, minutes=7)
    report(backend, "completed", "success", sha=SHA_B, job_name="lint", run_attempt=2)
    report(backend, "completed", "skipped", sha=SHA_B, job_name="docs")
    start, end = NOW.replace(hour=0) - dt.timedelta(days=1), frozen_clock.advance(minutes=1)

    from_rollups = pd.DataFrame(rollups.daily_table([backend.id], start, end))
    from_rollups = from_rollups.drop(columns="downstream_id")

    from_attempts = stats.daily_series(selectors.jobs_frame(start, end), start, end)
    pd.testing.assert_frame_equal(from_rollups, from_attempts, check_dtype=False)
    assert from_rollups["runs"].tolist() == [0, 2, 1]
