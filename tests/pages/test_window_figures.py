"""hud.reads.window: the summary's figures aggregated in SQL equal hud.stats on the attempts."""

import datetime as dt
from unittest import mock

import pandas as pd
import pytest
from django.db import transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from hud import stats
from hud.core import clock
from hud.models import Downstream, Level, LogicalJob
from hud.pages.common import cell_status, logical_with_status
from hud.reads import logical, selectors, window
from hud.reads.window import empty_figures, window_figures
from tests.conftest import NOW
from tests.ingestion.test_derived import REPO, _play, callbacks
from tests.support import builders

# Histories spread over days, so that the window, its margin and the spread's look-back differ.
steps = st.one_of(
    callbacks,
    callbacks,
    callbacks,
    st.fixed_dictionaries(
        {"kind": st.just("wait"), "minutes": st.sampled_from([1, 30, 400, 1440, 3 * 1440])}
    ),
    st.fixed_dictionaries({"kind": st.just("sweep")}),
)


def _from_attempts(downstream_id: int, start: dt.datetime, end: dt.datetime, now: dt.datetime):
    """The same figures from hud.stats over every attempt (the definition)."""
    everything = stats.prepare(selectors.jobs_frame(NOW - dt.timedelta(days=60), end))
    # Stuck attempts are of the rows a window's frame loads; the usual gap is of the latest
    # completed attempts, whatever the window.
    recent = stats.prepare(selectors.jobs_frame(start, end, [downstream_id]))
    rows = everything.rows
    completed = rows.loc[rows["status"] == "completed", "placed_at"].sort_values()
    completed = completed.iloc[-window.RECENT_RESULTS :]
    return {
        "pass_rate": stats.pass_rate(everything, start, end),
        "counts": stats.outcome_counts(everything, start, end),
        "execution_mean": stats.compute_metric("execution_seconds_mean", everything, start, end),
        "execution_p50": stats.compute_metric("execution_seconds_p50", everything, start, end),
        "stuck": len(stats.stuck_jobs(recent, now)),
        "last_result_at": stats.last_result_at(everything),
        "usual_gap": stats.usual_gap_seconds(
            completed.map(lambda moment: moment.timestamp()).to_numpy(dtype="float64")
        ),
    }


def _close(a: stats.Estimate, b: stats.Estimate) -> bool:
    """Equal estimates (floats to rounding: SQL and pandas sum in different orders)."""
    pairs = zip(a.to_dict().values(), b.to_dict().values(), strict=True)
    return all(
        x == pytest.approx(y, rel=1e-9) if isinstance(x, float) else x == y for x, y in pairs
    )


@pytest.mark.django_db
@settings(max_examples=40, deadline=None)
@given(st.lists(steps, min_size=10, max_size=40), st.sampled_from([1, 2, 7, 30]))
def test_window_figures_equal_hud_stats_on_the_attempts(script, days):
    # A short memory for the usual gap, so that histories this size reach past it.
    short = mock.patch.object(window, "RECENT_RESULTS", 6)
    with short, clock.frozen_at(NOW) as moving, transaction.atomic():
        backend = builders.downstream(REPO, Level.L2)
        for step in script:
            _play(backend, step, moving)
        now = moving.advance(minutes=1)
        start = now - dt.timedelta(days=days)

        figures = window_figures([backend.id], start, now, now)[backend.id]
        expected = _from_attempts(backend.id, start, now, now)

        assert figures.counts == expected["counts"]
        for name in ("pass_rate", "execution_mean", "execution_p50"):
            assert _close(getattr(figures, name), expected[name]), name
        assert figures.stuck == expected["stuck"]
        assert figures.last_result_at == expected["last_result_at"]
        assert figures.usual_gap == pytest.approx(expected["usual_gap"], abs=1e-3)
        transaction.set_rollback(True)


def test_many_backends_at_once_equal_each_alone(seeded, frozen_clock):
    ids = list(Downstream.objects.order_by("id").values_list("id", flat=True))
    now = clock.now()
    start = now - dt.timedelta(days=7)
    together = window_figures(ids, start, now, now)
    assert sum(f.counts.counted for f in together.values()) > 0
    for downstream_id in ids:
        alone = window_figures([downstream_id], start, now, now)[downstream_id]
        mine = together[downstream_id]
        assert (mine.counts, mine.pass_rate, mine.stuck) == (
            alone.counts,
            alone.pass_rate,
            alone.stuck,
        )
        assert (mine.execution_p50, mine.last_result_at) == (
            alone.execution_p50,
            alone.last_result_at,
        )
        assert mine.usual_gap == alone.usual_gap


def test_a_backend_without_results_has_empty_figures(db):
    backend = builders.downstream("org/quiet", Level.L2)
    figures = window_figures([backend.id], NOW - dt.timedelta(days=7), NOW, NOW)[backend.id]
    empty = empty_figures()
    assert (figures.counts, figures.pass_rate) == (empty.counts, empty.pass_rate)
    assert figures.pass_rate.value is None and figures.execution_p50.value is None
    assert figures.last_result_at is None and figures.stuck == 0
    assert figures.usual_gap is None


def _latest_with_status(prepared: stats.PreparedJobs, now: dt.datetime) -> pd.DataFrame:
    """`hud.stats`' latest attempts with their display status, stuck as `stats.stuck_jobs`
    finds the attempts."""
    stuck = set(stats.stuck_jobs(prepared, now)["id"].tolist())
    latest = prepared.latest
    display = [
        cell_status(status, conclusion, job_id in stuck)
        for status, conclusion, job_id in zip(
            latest["status"], latest["conclusion"], latest["id"], strict=True
        )
    ]
    return latest.assign(display=pd.Series(display, index=latest.index, dtype=object))


@pytest.mark.django_db
@settings(max_examples=40, deadline=None)
@given(st.lists(steps, min_size=10, max_size=40))
def test_latest_attempts_from_the_layer_equal_hud_stats(script):
    with clock.frozen_at(NOW) as moving, transaction.atomic():
        backend = builders.downstream(REPO, Level.L2)
        for step in script:
            _play(backend, step, moving)
        now = moving.advance(minutes=1)

        derived = logical_with_status(logical.latest_frame(LogicalJob.objects.all()), now)
        prepared = stats.prepare(selectors.jobs_frame(NOW - dt.timedelta(days=60), now))
        expected = _latest_with_status(prepared, now)

        columns = [*stats.JOB_COLUMNS, "attempts", "outcome", "display"]
        pd.testing.assert_frame_equal(
            derived[columns].reset_index(drop=True),
            expected[columns].reset_index(drop=True),
            check_dtype=False,
        )
        transaction.set_rollback(True)
