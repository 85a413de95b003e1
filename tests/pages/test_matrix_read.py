"""The backend page's matrices read in SQL (hud.reads.matrix) are `hud.stats`' latest attempts,
with their display statuses, laid out by the matrix's rule: every filter, every page."""

import datetime as dt

import pandas as pd
import pytest
from django.db import transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from hud import stats
from hud.core import clock
from hud.models import Job, Level
from hud.pages.common import Window
from hud.pages.matrices import MatrixFilters, column_order, matrix
from hud.reads import selectors
from hud.reads import window as window_reads
from tests.conftest import NOW
from tests.ingestion.test_derived import REPO, _play, steps
from tests.pages.test_window_figures import _latest_with_status
from tests.support import builders


def _mostly_none(*values):
    """A filter's value: none (every job) as often as not."""
    return st.none() | st.none() | st.sampled_from(values)


filters = st.builds(
    MatrixFilters,
    event_type=_mostly_none("pull_request", "push"),
    job_name=_mostly_none("build", "test"),
    conclusion=_mostly_none("success", "failure", "in_progress", "stuck"),
    pr=_mostly_none(7, 8),
)


def _laid_out(latest: pd.DataFrame, events, wanted: MatrixFilters, window: Window, page, size):
    """The matrix by its definition: the wanted latest attempts' rows, newest first (by their
    newest job, then head SHA, event type, PR), one page; a cell per (workflow, job)."""
    rows = [
        job
        for job in latest.to_dict("records")
        if job["event_type"] in events
        and window.start <= job["placed_at"] < window.end
        and wanted.event_type in (None, job["event_type"])
        and wanted.job_name in (None, job["job_name"])
        and wanted.pr in (None, job["pr_number"])
        and wanted.conclusion in (None, job["display"])
    ]
    newest: dict[tuple, pd.Timestamp] = {}
    for job in rows:
        key = (job["event_type"], job["pr_number"], job["head_sha"])
        newest[key] = max(newest.get(key, job["placed_at"]), job["placed_at"])
    heads = sorted(newest, key=lambda k: (-newest[k].value, k[2], k[0], k[1]))
    pages = max(1, -(-len(heads) // size))
    page = min(max(page, 1), pages)
    shown = heads[(page - 1) * size : page * size]
    cells = {
        (job["event_type"], job["pr_number"], job["head_sha"], job["workflow_name"],
         job["job_name"]): (int(job["id"]), job["display"], int(job["attempts"]))
        for job in rows
    }  # fmt: skip
    columns = sorted({key[3:] for key in cells if key[:3] in shown}, key=column_order)
    return {
        "page": page if heads else 1,
        "pages": pages,
        "total": len(heads),
        "columns": columns if heads else [],
        "rows": [
            (key, newest[key].to_pydatetime(), [cells.get((*key, *column)) for column in columns])
            for key in shown
        ],
    }


def _read(m):
    return {
        "page": m.page,
        "pages": m.pages,
        "total": m.total_rows,
        "columns": m.columns,
        "rows": [
            (
                (row.event_type, row.pr_number, row.head_sha),
                row.placed_at,
                [None if c is None else (c.job.id, c.status, c.attempts) for c in row.cells],
            )
            for row in m.rows
        ],
    }


@pytest.mark.django_db
@settings(max_examples=60, deadline=None)
@given(
    st.lists(steps, min_size=10, max_size=40),
    filters,
    st.sampled_from([1, 2, 7]),
    st.integers(1, 4),
    st.integers(1, 3),
)
def test_a_matrix_page_is_hud_stats_latest_attempts_laid_out(script, wanted, days, page, size):
    with clock.frozen_at(NOW) as moving, transaction.atomic():
        backend = builders.downstream(REPO, Level.L2)
        for step in script:
            _play(backend, step, moving)
        now = moving.advance(minutes=1)
        window = Window.ending(now, days)
        latest = _latest_with_status(
            stats.prepare(selectors.jobs_frame(NOW - dt.timedelta(days=60), now)), now
        )
        events = ("pull_request", "push")

        read = matrix(backend.id, events, wanted, window, now, page, page_size=size)

        assert _read(read) == _laid_out(latest, events, wanted, window, page, size)
        transaction.set_rollback(True)


@pytest.mark.django_db
def test_pinned_columns_come_first_in_pin_order():
    with clock.frozen_at(NOW) as moving:
        backend = builders.downstream(REPO, Level.L2)
        for job in ("build", "test", "lint"):
            _play(backend, _callback(job), moving)
        window = Window.ending(moving.advance(minutes=1), 1)

        read = matrix(backend.id, ("pull_request",), MatrixFilters(), window, clock.now(), 1,
                      pins=("test", "lint"))  # fmt: skip

    assert [job for _, job in read.columns] == ["test", "lint", "build"]
    assert read.pinned == 2


@pytest.mark.django_db
def test_a_job_in_progress_past_the_stuck_threshold_shows_stuck_and_filters_alone():
    with clock.frozen_at(NOW) as moving:
        backend = builders.downstream(REPO, Level.L2)
        _play(backend, _callback("build", completed=False, sha="a" * 40), moving)
        moving.advance(hours=3, minutes=1)
        _play(backend, _callback("build", completed=False, sha="b" * 40), moving)
        now = moving.advance(minutes=1)
        window = Window.ending(now, 1)

        def statuses(conclusion=None):
            read = matrix(backend.id, ("pull_request",), MatrixFilters(conclusion=conclusion),
                          window, now, 1)  # fmt: skip
            return [(row.head_sha[0], [c.status for c in row.cells]) for row in read.rows]

        assert statuses() == [("b", ["in_progress"]), ("a", ["stuck"])]
        assert statuses("stuck") == [("a", ["stuck"])]
        assert statuses("in_progress") == [("b", ["in_progress"])]
        # Without an in_progress receipt, its placement tells how long it has been running
        # (`stats.is_stuck`), for the cells as for the summary's count (one rule: rows.STUCK_SQL).
        Job.objects.filter(head_sha="a" * 40).update(in_progress_received_at=None)
        assert statuses() == [("b", ["in_progress"]), ("a", ["stuck"])]
        assert window_reads.stuck_counts([backend.id], window.start, window.end, now) == {
            backend.id: 1
        }


def _callback(job_name: str, *, completed: bool = True, sha: str = "a" * 40) -> dict:
    return {
        "kind": "callback", "sha": sha, "pr": 7, "event_type": "pull_request",
        "job_name": job_name, "run_attempt": 1, "completed": completed, "conclusion": "success",
        "failed": 0,
    }  # fmt: skip
