"""The gate reads the derived layer (hud.reads.gate): equal to hud.stats on the attempt frame.

Simulated histories through the real ingestion service (re-runs, matrix legs, cancels that a
later push supersedes, time-outs and the sweeper, days apart), evaluated as of every midnight
and moments in between, both ways: every metric, the last result and on-call responses agree,
and so do the backend page's stat cards, read in SQL from the layer.
"""

import datetime as dt

import pytest
from django.db import transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from hud import gates, promotion, stats
from hud.core import clock
from hud.models import Level
from hud.pages.backend import backend_summary
from hud.pages.common import Window
from hud.reads import selectors
from hud.reads.gate import gate_jobs
from hud.reads.window import window_figures
from tests.conftest import NOW
from tests.ingestion.test_derived import REPO, _play, report, steps
from tests.support import builders

SINCE = dt.timedelta(days=31)  # what evaluate_backend reads: the policy's horizon + 1 day
legs = st.fixed_dictionaries(
    {
        "kind": st.just("leg"),
        "sha": st.sampled_from(["a" * 40, "b" * 40]),
        "conclusion": st.sampled_from(["success", "failure", "timed_out"]),
    }
)
days = st.fixed_dictionaries({"kind": st.just("days"), "days": st.integers(1, 9)})


def _step(backend, step: dict, moving: clock.MovableClock) -> None:
    if step["kind"] == "days":
        moving.advance(days=step["days"], minutes=17)
    elif step["kind"] == "leg":
        # A second matrix leg of the same attempt: same run id and attempt, its own check run.
        moving.advance(minutes=3)
        report(
            backend,
            "completed",
            step["conclusion"],
            sha=step["sha"],
            job_name="build",
            check_run_id=f"leg-{moving.moment.timestamp()}",
        )
    else:
        _play(backend, step, moving)


def _moments(end: dt.datetime) -> list[dt.datetime]:
    """Midnights (at most five, spread over the history), moments between them, and the end."""
    first = NOW.replace(hour=0) + dt.timedelta(days=1)
    count = (end - first).days + 2
    midnights = [first + dt.timedelta(days=i * count // 5) for i in range(min(count, 5))]
    between = [NOW + dt.timedelta(hours=5), end, end + dt.timedelta(seconds=1)]
    return sorted(
        {*midnights, *(m + dt.timedelta(hours=9, minutes=13) for m in midnights[::2])}
        | set(between)
    )


def _both_ways(backend, as_of: dt.datetime) -> None:
    jobs = gate_jobs(backend, [], as_of - SINCE, as_of)
    frame = selectors.jobs_frame(as_of - SINCE, as_of, [backend.id])
    reference = stats.prepare(stats.as_of(frame, as_of))
    for days_back in (1, 14):
        start = as_of - dt.timedelta(days=days_back)
        for name in stats.METRIC_NAMES:
            layered = stats.compute_metric(name, jobs.prepared, start, as_of)
            assert layered == stats.compute_metric(name, reference, start, as_of), (name, as_of)
    assert stats.last_result_at(jobs.prepared) == stats.last_result_at(reference)
    hours = promotion.oncall_response_hours
    assert hours(jobs.attempts) == hours(stats.as_of(frame, as_of))
    since = as_of - dt.timedelta(days=14)
    assert hours(jobs.attempts, since) == hours(stats.as_of(frame, as_of), since)
    policy = promotion.gate_policy()
    for current, target in (("L2", "L3"), ("L3", "L4")):
        arguments = {"current_level": current, "target_level": target, "as_of": as_of}
        assert gates.gate_metrics(jobs.prepared, policy, **arguments) == gates.gate_metrics(
            frame, policy, **arguments
        )
    _page_both_ways(backend, as_of)


def _page_both_ways(backend, now: dt.datetime) -> None:
    """The backend page's stat cards over a 7-day window ending `now`, read in SQL from the
    layer, equal `hud.stats.backend_summary` of every attempt placed before `now`; its stuck
    attempts are those of the window and its margin, as `/crcr` counts them."""
    start = now - dt.timedelta(days=7)
    expected = stats.backend_summary(
        selectors.jobs_frame(NOW - dt.timedelta(days=400), now, [backend.id]), start, now, now
    )
    expected["stuck_jobs"] = len(
        stats.stuck_jobs(selectors.jobs_frame(start, now, [backend.id]), now)
    )
    assert backend_summary(backend, Window.ending(now, 7), now) == expected


@pytest.mark.django_db
@settings(max_examples=20, deadline=None)  # each example is a whole history, ~3 s
@given(st.lists(st.one_of(steps, steps, legs, days), min_size=12, max_size=45))
def test_gate_jobs_from_the_layer_equal_the_attempt_frame(script):
    with clock.frozen_at(NOW) as moving, transaction.atomic():
        backend = builders.downstream(REPO, Level.L2)
        for step in script:
            _step(backend, step, moving)
        for as_of in _moments(moving.moment):
            _both_ways(backend, as_of)
        transaction.set_rollback(True)


@pytest.mark.django_db
def test_a_row_placed_after_the_moment_never_changes_the_gate_as_of_it():
    """Found by the property test: a PR's re-runs arriving out of order, then a push row of the
    same run still in progress, placed hours later. The layer keeps the earlier push row as
    its latest (outcome: unfinished); as of a moment before the later row, the push passed."""
    a = "a" * 40
    build = {"kind": "callback", "sha": a, "job_name": "build", "failed": 0}
    done = {**build, "completed": True, "conclusion": "success"}
    script = [
        {"kind": "wait", "minutes": 1},
        {**done, "pr": 8, "event_type": "push", "run_attempt": 1},
        {"kind": "wait", "minutes": 400},
        {**done, "pr": 7, "event_type": "pull_request", "run_attempt": 2},
        {"kind": "sweep"},
        {**done, "pr": 7, "event_type": "pull_request", "run_attempt": 1},
        {"kind": "wait", "minutes": 400},
        {**build, "pr": 7, "event_type": "push", "run_attempt": 1, "completed": False,
         "conclusion": "skipped"},
    ]  # fmt: skip
    with clock.frozen_at(NOW) as moving:
        backend = builders.downstream(REPO, Level.L2)
        for step in script:
            _step(backend, step, moving)
        as_of = NOW + dt.timedelta(hours=5)
        jobs = gate_jobs(backend, [], as_of - SINCE, as_of)
        rate = stats.compute_metric("job_pass_rate", jobs.prepared, as_of - SINCE, as_of)
        assert (rate.value, rate.n) == (1.0, 1)
        _both_ways(backend, as_of)


@pytest.mark.django_db
def test_a_leg_left_open_before_the_window_holds_the_attempt_open_on_the_page_as_on_crcr():
    """Found by the property test: one leg of an attempt reported in progress (and never swept),
    its other leg completed as timed out nine days later. The layer holds the attempt open; a
    7-day window's rows hold only the timed-out leg, and its prepared jobs count what they say
    (gate_jobs' contract, for a gate with exclusions). The backend page reads the layer, as
    `/crcr` does: both say unfinished."""
    b = "b" * 40
    script = [
        {"kind": "callback", "sha": b, "pr": 8, "event_type": "pull_request",
         "job_name": "build", "run_attempt": 1, "completed": False, "conclusion": "failure",
         "failed": 0},
        {"kind": "days", "days": 9},
        {"kind": "leg", "sha": b, "conclusion": "timed_out"},
    ]  # fmt: skip
    with clock.frozen_at(NOW) as moving:
        backend = builders.downstream(REPO, Level.L2)
        for step in script:
            _step(backend, step, moving)
        now = moving.moment + dt.timedelta(seconds=1)
        start = now - dt.timedelta(days=7)
        counts = stats.backend_summary(gate_jobs(backend, (), start, now).prepared, start, now, now)
        assert (counts["counts"].timed_out, counts["counts"].excluded) == (1, 0)
        page = backend_summary(backend, Window.ending(now, 7), now)["counts"]
        assert (page.timed_out, page.excluded) == (0, 1)
        assert page == window_figures([backend.id], start, now, now)[backend.id].counts
        _page_both_ways(backend, now)
