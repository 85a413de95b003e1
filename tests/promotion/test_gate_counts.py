"""The gate's counts read in SQL (hud.reads.gate_counts) equal hud.stats on the attempts.

Simulated histories through the real ingestion service (re-runs, matrix legs, superseded
cancels, time-outs and the sweeper, days apart), read as of moments after their last attempt
and at every time of day: each metric the counts give, over windows starting on any day and
at any hour, equals the metric of the prepared attempts; and a whole evaluation from the
counts equals the one from prepared jobs.
"""

import datetime as dt
import json

import pytest
from django.db import transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from hud import promotion, stats
from hud.core import clock
from hud.models import Downstream, Level
from hud.reads import gate_counts, selectors
from tests.conftest import NOW
from tests.ingestion.test_derived import REPO, steps
from tests.promotion import report
from tests.promotion.test_gate_layer import _step, days, legs
from tests.support import attribution_sim, builders

WINDOWS = (1, 7, 14, 28, 30)


def _counts_equal_the_attempts(backend, as_of: dt.datetime) -> None:
    counts = gate_counts.backend_counts([backend.id], WINDOWS, 30, as_of)[backend.id]
    frame = selectors.jobs_frame(NOW - dt.timedelta(days=400), as_of, [backend.id])
    reference = stats.prepare(stats.as_of(frame, as_of))
    for days_back in WINDOWS:
        start = as_of - dt.timedelta(days=days_back)
        for name in sorted(gate_counts.SUPPORTED):
            expected = stats.compute_metric(name, reference, start, as_of)
            assert counts.metric(name, start, stats.DEFAULT_MIN_N) == expected, (name, days_back)
    assert counts.last_result == stats.last_result_at(reference)


@pytest.mark.django_db
@settings(max_examples=20, deadline=None)  # each example is a whole history, ~3 s
@given(
    st.lists(st.one_of(steps, steps, legs, days), min_size=12, max_size=45),
    st.integers(0, 23 * 60 + 59),
)
def test_gate_counts_equal_the_prepared_attempts(script, minutes):
    with clock.frozen_at(NOW) as moving, transaction.atomic():
        backend = builders.downstream(REPO, Level.L2)
        for step in script:
            _step(backend, step, moving)
        # Any time of day after the last attempt: window starts split a day anywhere.
        as_of = moving.moment + dt.timedelta(minutes=1 + minutes)
        assert gate_counts.placed_before([backend.id], as_of) == {backend.id}
        _counts_equal_the_attempts(backend, as_of)
        transaction.set_rollback(True)


def test_only_metrics_counts_give_are_read_from_counts():
    policy = promotion.gate_policy()
    assert gate_counts.supports(policy.promotion_criteria("L3"))
    assert gate_counts.supports(policy.demotion_criteria("L3"))
    # Flakiness and on-call response need each attempt of a re-run job.
    assert not gate_counts.supports(policy.promotion_criteria("L4"))


@pytest.mark.django_db
def test_an_attempt_placed_after_the_moment_leaves_its_backend_to_the_prepared_jobs():
    with clock.frozen_at(NOW):
        backend = builders.downstream(REPO, Level.L2)
        report(backend)
    assert gate_counts.placed_before([backend.id], NOW + dt.timedelta(seconds=1)) == {backend.id}
    assert gate_counts.placed_before([backend.id], NOW) == set()


def _as_json(gate: promotion.BackendGate) -> str:
    return json.dumps(gate.to_dict(), sort_keys=True, default=str)


@pytest.mark.django_db
def test_an_evaluation_from_counts_equals_the_one_from_prepared_jobs(frozen_clock, monkeypatch):
    # Corroborated PR breakages, re-runs, infra spells and broken trunk: verdicts excuse
    # failures, so the adjusted pass rate is taken from the counts too.
    attribution_sim.simulate(11, attribution_sim.SMALL, NOW, frozen_clock)
    backends = list(Downstream.objects.order_by("id"))
    counted = promotion.evaluate_backends(backends, as_of=NOW)
    monkeypatch.setattr(gate_counts, "supports", lambda criteria: False)
    prepared = promotion.evaluate_backends(backends, as_of=NOW)
    excluded = 0
    for item in backends:
        assert _as_json(counted[item.id]) == _as_json(prepared[item.id]), item.full_name
        excluded += len(counted[item.id].adjusted["excluded"])
    assert excluded >= 2
