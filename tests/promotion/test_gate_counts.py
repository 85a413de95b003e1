"""The gate's counts read in SQL (hud.reads.gate_counts: whole days from the daily rollups, the
days windows start on from the layer's rows) equal hud.stats on the attempts.

Simulated histories through the real ingestion service (re-runs, matrix legs, superseded
cancels, time-outs and the sweeper, days apart), read as of midnights, moments between them
(later attempts re-derived) and any time of day after the last attempt: each metric, over
windows starting on any day and at any hour, equals the metric of all the prepared attempts
as of that moment; and a whole evaluation from the counts equals the one from prepared jobs.
"""

import datetime as dt
import json
from unittest import mock

import pytest
from django.db import transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from hud import promotion, stats
from hud.core import clock
from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import Downstream, Job, Level, LogicalJob
from hud.reads import gate_counts, selectors
from tests.conftest import NOW
from tests.ingestion.test_derived import REPO, SHA_A, SHA_B, steps
from tests.promotion.test_gate_layer import _moments, _step, days, legs
from tests.support import attribution_sim, builders

WINDOWS = (1, 7, 14, 28, 30)


def _counts_equal_the_attempts(backend, as_of: dt.datetime) -> None:
    frame = selectors.jobs_frame(NOW - dt.timedelta(days=400), as_of, [backend.id])
    reference = stats.prepare(stats.as_of(frame, as_of))
    # The SHAs and PRs the as-of correction re-derives read one at a time, and all at once.
    for chunk in (1, gate_counts.IN_CHUNK):
        with mock.patch.object(gate_counts, "IN_CHUNK", chunk):
            counts = gate_counts.backend_counts([backend.id], WINDOWS, 30, as_of, flips=True)
        for days_back in WINDOWS:
            start = as_of - dt.timedelta(days=days_back)
            for name in sorted(gate_counts.SUPPORTED):
                expected = stats.compute_metric(name, reference, start, as_of)
                got = counts[backend.id].metric(name, start, stats.DEFAULT_MIN_N)
                assert got == expected, (name, days_back, chunk)
        assert counts[backend.id].last_result == stats.last_result_at(reference)
    # The on-call responses paired in SQL are the ones paired from all the attempts.
    for days_back in (1, 14, 28):
        since = as_of - dt.timedelta(days=days_back)
        paired = gate_counts.oncall_responses([backend.id], since, as_of)[backend.id]
        expected = promotion.oncall_response_hours(stats.as_of(frame, as_of), since)
        assert sorted(hours for _, hours in paired) == sorted(expected), days_back
        assert all(placed_at >= since for placed_at, _ in paired)


@pytest.mark.django_db
@settings(max_examples=15, deadline=None)  # each example is a whole history, ~4 s
@given(
    st.lists(st.one_of(steps, steps, legs, days), min_size=12, max_size=45),
    st.integers(0, 23 * 60 + 59),
)
def test_gate_counts_equal_the_prepared_attempts(script, minutes):
    with clock.frozen_at(NOW) as moving, transaction.atomic():
        backend = builders.downstream(REPO, Level.L2)
        for step in script:
            _step(backend, step, moving)
        # Midnights and moments between them, where later attempts are re-derived, and any
        # time of day after the last attempt: window starts split a day anywhere.
        for as_of in (*_moments(moving.moment), moving.moment + dt.timedelta(minutes=minutes)):
            _counts_equal_the_attempts(backend, as_of)
        transaction.set_rollback(True)


@pytest.mark.django_db
def test_a_first_attempt_superseded_only_later_counts_as_the_cancel_it_was():
    """A job's first attempt, a cancel on PR 7, is superseded by a push to PR 7 after `as_of`;
    its latest attempt ran for PR 8, so the layer's row names PR 8, not the PR written to."""
    cancel = {"kind": "callback", "sha": SHA_A, "pr": 7, "event_type": "pull_request",
              "job_name": "build", "run_attempt": 1, "completed": True,
              "conclusion": "cancelled", "failed": 0}  # fmt: skip
    with clock.frozen_at(NOW) as moving:
        backend = builders.downstream(REPO, Level.L2)
        _step(backend, cancel, moving)
        _step(backend, {"kind": "wait", "minutes": 60}, moving)
        _step(backend, {**cancel, "pr": 8, "run_attempt": 2, "conclusion": "success"}, moving)
        as_of = moving.moment + dt.timedelta(minutes=30)
        _step(backend, {"kind": "wait", "minutes": 120}, moving)
        _step(backend, {**cancel, "sha": SHA_B, "conclusion": "success"}, moving)
        assert LogicalJob.objects.get(head_sha=SHA_A).first_outcome == stats.SUPERSEDED
        _counts_equal_the_attempts(backend, as_of)


@pytest.mark.django_db
def test_trunk_and_nightly_series_flip_the_same_counted():
    """Trunk pushes and nightlies (the flip rate's series, which the random histories above do
    not make), one re-run after the moment judged: the flips counted equal hud.stats'."""

    def run(sha: str, event_type: str, conclusion: str, attempt: int = 1) -> None:
        moving.advance(hours=5)
        body = builders.callback_body(
            REPO, status="completed", conclusion=conclusion, event_type=event_type,
            delivery_id=f"{event_type}-{sha}", payload={"after": sha, "ref": stats.TRUNK_REF},
            job_name="build", run_attempt=attempt,
        )  # fmt: skip
        ingest.store(backend, parse_callback(body, REPO), source=Job.Source.CALLBACK)

    with clock.frozen_at(NOW) as moving:
        backend = builders.downstream(REPO, Level.L2)
        for i, conclusion in enumerate("sfssffsfs"):
            outcome = "success" if conclusion == "s" else "failure"
            run(f"{i:040x}", ("push", "nightly")[i % 2], outcome)
        as_of = moving.moment + dt.timedelta(minutes=1)
        run(f"{8:040x}", "push", "success", attempt=2)  # the last push, re-run into a pass
        for moment in (as_of, moving.moment + dt.timedelta(minutes=1)):
            counts = gate_counts.backend_counts([backend.id], [7], 0, moment, flips=True)
            assert counts[backend.id].metric("flip_rate", NOW, 1).n > 0
            _counts_equal_the_attempts(backend, moment)


def test_every_metric_a_policy_may_name_is_read_from_counts():
    policy = promotion.gate_policy()
    for level in ("L2", "L3", "L4"):
        assert gate_counts.supports(policy.promotion_criteria(level)), level
        assert gate_counts.supports(policy.demotion_criteria(level)), level
    assert set(stats.METRIC_NAMES) == gate_counts.SUPPORTED


def _as_json(gate: promotion.BackendGate) -> str:
    return json.dumps(gate.to_dict(), sort_keys=True, default=str)


@pytest.mark.django_db
@pytest.mark.parametrize("days_back", [0, 3])
def test_an_evaluation_from_counts_equals_the_one_from_prepared_jobs(
    frozen_clock, monkeypatch, days_back
):
    # Corroborated PR breakages, re-runs, infra spells and broken trunk: verdicts excuse
    # failures, so the adjusted pass rate is taken from the counts too. Three days back, later
    # rows are re-derived.
    attribution_sim.simulate(11, attribution_sim.SMALL, NOW, frozen_clock)
    backends = list(Downstream.objects.order_by("id"))
    as_of = NOW - dt.timedelta(days=days_back)
    counted = promotion.evaluate_backends(backends, as_of=as_of)
    monkeypatch.setattr(gate_counts, "supports", lambda criteria: False)
    prepared = promotion.evaluate_backends(backends, as_of=as_of)
    excluded = 0
    for item in backends:
        assert _as_json(counted[item.id]) == _as_json(prepared[item.id]), item.full_name
        excluded += len(counted[item.id].adjusted["excluded"])
    assert excluded >= 2


@pytest.mark.django_db
def test_counts_by_last_row_not_read_are_refused_not_guessed():
    backend = builders.downstream("sim/unread", Level.L2)
    counts = gate_counts.backend_counts([backend.id], [7], 0, NOW, last_rows=[])[backend.id]
    with pytest.raises(ValueError, match="flake_rate"):
        counts.metric("flake_rate", NOW - dt.timedelta(days=7), 1)
    assert counts.metric("job_pass_rate", NOW - dt.timedelta(days=7), 1).n == 0
