"""The daily medians a read keeps (hud.reads.rollups): a whole day's are read again only when
its rollup rows changed, and what the table shows always equals the medians of the attempts.

Imported results land on their reported day, so late attempts change past days that a read
has already kept; reads come between writes and rebuilds of the layer, days apart."""

import datetime as dt
from unittest import mock

import pandas as pd
import pytest
from django.core.cache import cache
from django.db import connection, transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from hud import stats
from hud.core import clock
from hud.ingestion import derived, ingest
from hud.models import Job, Level
from hud.reads import rollups, selectors
from tests.conftest import NOW
from tests.support import builders

REPO = "org/repo"
DAYS = 4


def _import(day_back: int, run_id: int, conclusion: str, execution: float, queue: float):
    """An imported result completed `day_back` days and a minute ago (never after the read's
    end: the rollups count a whole day, the attempts read end now)."""
    done = clock.now() - dt.timedelta(days=day_back, minutes=1)
    body = builders.callback_body(
        REPO, status="completed", conclusion=conclusion, run_id=run_id, job_name=f"job-{run_id}"
    )
    body["workflow"]["completed_at"] = done.strftime("%Y-%m-%dT%H:%M:%SZ")
    forward = builders.forward_body(body, REPO, queue_time=queue, execution_time=execution)
    try:
        ingest.receive_forward(forward, source=Job.Source.IMPORT)
    except ingest.Rejected as refused:  # a conflicting result for the same attempt
        assert refused.http_status == 409


def _table_equals_the_attempts(backend) -> None:
    end = clock.now()
    start = (end - dt.timedelta(days=DAYS - 1)).replace(hour=0, minute=0, second=0)
    frame = selectors.jobs_frame(start, end)
    for events in (None, ("pull_request",)):
        table = pd.DataFrame(rollups.daily_table([backend.id], start, end, events))
        expected = stats.daily_series(frame, start, end)
        pd.testing.assert_frame_equal(
            table.drop(columns="downstream_id"), expected, check_dtype=False
        )


imports = st.tuples(
    st.just("import"),
    st.integers(0, DAYS - 1),
    st.integers(1, 6),  # few run ids: repeats are duplicates or conflicts
    st.sampled_from(["success", "failure", "skipped"]),
    st.sampled_from([30.0, 600.0, 1234.5, 7200.0]),
    st.sampled_from([0.0, 60.0, 900.0]),
)
steps = st.one_of(
    imports,
    imports,
    st.tuples(st.just("read")),
    st.tuples(st.just("wait"), st.sampled_from([90, 600, 1440])),
    st.tuples(st.just("rebuild")),
)


@pytest.mark.django_db
@settings(max_examples=30, deadline=None)
@given(st.lists(steps, min_size=5, max_size=30))
def test_kept_medians_equal_the_attempts_after_any_writes(script):
    # Each example's rows are rolled back, and SQLite gives the next one the same ids: what a
    # read kept belongs to a database that no longer exists.
    cache.clear()
    with clock.frozen_at(NOW) as moving, transaction.atomic():
        backend = builders.downstream(REPO, Level.L2)
        for step in (*script, ("read",)):
            if step[0] == "import":
                _import(*step[1:])
            elif step[0] == "wait":
                moving.advance(minutes=step[1])
            elif step[0] == "rebuild":  # `manage.py rebuild_derived`
                with connection.cursor() as cursor, connection.chunked_cursor() as stream:
                    derived.rebuild(cursor, stream, connection.vendor)
            else:
                _table_equals_the_attempts(backend)
        transaction.set_rollback(True)


@pytest.fixture
def days_read(frozen_clock):
    """A backend with a success on each of the last `DAYS` days, and the ISO days each read of
    the attempts' medians takes (a list per `_median_rows` call)."""
    backend = builders.downstream(REPO, Level.L2)
    for day_back in range(DAYS):
        _import(day_back, run_id=10 + day_back, conclusion="success", execution=600.0, queue=60.0)
    asked = []
    real = rollups._median_rows

    def spy(wanted, end, events):
        rows = real(wanted, end, events)
        asked.append(sorted(day for _, day, _, _ in rows))
        return rows

    with mock.patch.object(rollups, "_median_rows", spy):
        yield backend, asked


@pytest.mark.django_db
def test_a_read_takes_again_only_the_days_written_to_since(days_read):
    backend, asked = days_read
    _table_equals_the_attempts(backend)  # every day, twice (all events, then PRs)
    asked.clear()
    _table_equals_the_attempts(backend)  # today only: the past days are kept
    today = clock.now().date().isoformat()
    assert asked == [[today], [today]]
    # A late result two days back: that day is taken again, with its new median.
    _import(2, run_id=99, conclusion="failure", execution=7200.0, queue=0.0)
    asked.clear()
    _table_equals_the_attempts(backend)
    two_days_back = (clock.now() - dt.timedelta(days=2)).date().isoformat()
    assert asked == [sorted([two_days_back, today])] * 2


@pytest.mark.django_db
def test_a_process_copy_answers_until_the_shared_cache_is_cleared(days_read):
    backend, asked = days_read
    _table_equals_the_attempts(backend)
    asked.clear()
    # The past days from this process's copy: the shared cache is not read for them.
    with mock.patch.object(cache, "get_many", side_effect=AssertionError("read")):
        _table_equals_the_attempts(backend)
    today = clock.now().date().isoformat()
    assert asked == [[today], [today]]
    # A cleared cache (an operator's, or a test's) takes this process's copy with it.
    cache.clear()
    asked.clear()
    _table_equals_the_attempts(backend)
    every_day = sorted(
        (clock.now() - dt.timedelta(days=back)).date().isoformat() for back in range(DAYS)
    )
    assert asked == [every_day, every_day]


@pytest.mark.django_db
def test_a_process_without_a_copy_reads_what_another_kept(days_read, monkeypatch):
    backend, asked = days_read
    _table_equals_the_attempts(backend)  # kept in the shared cache, and in this copy
    # Another process: the same shared cache and epoch, no copy of its own yet.
    monkeypatch.setattr(rollups, "_here", (rollups._here[0], {}))
    asked.clear()
    _table_equals_the_attempts(backend)
    today = clock.now().date().isoformat()
    assert asked == [[today], [today]]
