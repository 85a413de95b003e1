"""On-call responsiveness: hours from a failed PR attempt to the next attempt of that job."""

import datetime as dt
import itertools
import random

import pandas as pd
import pytest

from hud import promotion, stats
from hud.models import Level
from hud.promotion import evaluation
from tests.conftest import NOW
from tests.promotion import backend, report

T0 = pd.Timestamp("2026-03-02 08:00", tz="UTC")


def attempts(*rows: tuple) -> pd.DataFrame:
    """(id, job, head, run_id, attempt, conclusion, hours after T0[, event, status]) → frame."""
    records = []
    for row in rows:
        job_id, job, head, run_id, attempt, conclusion, hours, *rest = row
        event, status = (rest + ["pull_request", "completed"][len(rest) :])[:2]
        records.append(
            {
                "id": job_id,
                "downstream": "org/repo",
                "event_type": event,
                "head_sha": head,
                "workflow_name": "ci",
                "job_name": job,
                "run_id": run_id,
                "run_attempt": attempt,
                "status": status,
                "conclusion": conclusion,
                # Microseconds, as the database stores them.
                "placed_at": (T0 + pd.Timedelta(hours=hours)).round("us"),
            }
        )
    return pd.DataFrame.from_records(records)


def loop_reference(frame: pd.DataFrame) -> list[float]:
    """The former row-by-row implementation, kept here as the oracle."""
    prs = frame[(frame["event_type"] == "pull_request") & (frame["status"] == "completed")]
    if prs.empty:
        return []
    ordered = prs.sort_values([*stats.LOGICAL_JOB_KEY, *stats.ATTEMPT_ORDER])
    hours = []
    for _, group in ordered.groupby(stats.LOGICAL_JOB_KEY, sort=False):
        for failed, following in itertools.pairwise(group.to_dict("records")):
            if failed["conclusion"] == "failure":
                seconds = (following["placed_at"] - failed["placed_at"]).total_seconds()
                hours.append(max(seconds, 0.0) / 3600.0)
    return hours


HAND_BUILT = attempts(
    # job a on head1: failed, re-run 2 h later failed again, re-run 30 min later succeeded.
    (3, "a", "head1", 10, 3, "success", 2.5),
    (1, "a", "head1", 10, 1, "failure", 0.0),
    (2, "a", "head1", 10, 2, "failure", 2.0),
    # job b on head1: a failure nobody re-ran (no next attempt: not counted).
    (4, "b", "head1", 11, 1, "failure", 1.0),
    # job a on head2: a failure whose next attempt was placed earlier (clock skew): 0 h.
    (5, "a", "head2", 12, 1, "failure", 5.0),
    (6, "a", "head2", 13, 1, "cancelled", 4.0),
    # not PR attempts, or not completed: ignored, even between a failure and its re-run.
    (7, "c", "head1", 14, 1, "failure", 0.0, "push"),
    (8, "c", "head1", 14, 2, "success", 1.0, "push"),
    (9, "d", "head1", 15, 1, "failure", 0.0),
    (10, "d", "head1", 15, 2, "", 0.5, "pull_request", "in_progress"),
    (11, "d", "head1", 15, 3, "success", 3.0),
)


def test_oncall_response_hours_on_a_hand_built_frame():
    assert promotion.oncall_response_hours(HAND_BUILT) == [2.0, 0.5, 3.0, 0.0]


def test_oncall_response_hours_matches_the_row_by_row_definition():
    assert promotion.oncall_response_hours(HAND_BUILT) == loop_reference(HAND_BUILT)


@pytest.mark.parametrize("seed", range(5))
def test_oncall_response_hours_matches_the_loop_on_random_histories(seed):
    rng = random.Random(seed)
    rows = []
    for job_id in range(300):
        rows.append(
            (
                job_id,
                rng.choice("abc"),
                rng.choice(["h1", "h2", "h3", "h4"]),
                rng.randint(1, 20),
                rng.randint(1, 3),
                rng.choice(["failure", "failure", "success", "cancelled", "timed_out"]),
                rng.uniform(0, 72),
                rng.choice(["pull_request"] * 4 + ["push", "nightly"]),
                rng.choice(["completed"] * 5 + ["in_progress"]),
            )
        )
    frame = attempts(*rows)
    assert promotion.oncall_response_hours(frame) == loop_reference(frame)


def test_oncall_response_hours_of_no_pr_attempts_is_empty():
    assert promotion.oncall_response_hours(HAND_BUILT[HAND_BUILT["event_type"] == "push"]) == []
    assert promotion.oncall_response_hours(HAND_BUILT.iloc[0:0]) == []


def test_oncall_response_hours_are_plain_floats():
    assert all(type(h) is float for h in promotion.oncall_response_hours(HAND_BUILT))


def test_oncall_response_hours_since_keep_the_failures_placed_from_then():
    # Paired over every attempt first: job d's failure at 0 h is answered at 3 h, not counted.
    since = (T0 + pd.Timedelta(hours=1)).to_pydatetime()
    assert promotion.oncall_response_hours(HAND_BUILT, since) == [0.5, 0.0]


def _failed_then_rerun(downstream, frozen_clock, number: int, hours: float) -> None:
    """A PR job failing, re-run (attempt 2 of the same run) `hours` later and passing."""
    report(downstream, "failure", number=number)
    frozen_clock.advance(hours=hours)
    report(downstream, number=number, run_attempt=2)


@pytest.mark.django_db
def test_an_l3_gate_measures_on_call_responses_over_its_criterion_window(frozen_clock):
    npu = backend("org/npu", Level.L3, since=NOW - dt.timedelta(days=90))
    for number in (9_001, 9_002, 9_003):  # slow answers, more than 28 days before the evaluation
        _failed_then_rerun(npu, frozen_clock, number, hours=10)
    frozen_clock.advance(days=10)
    for number in (9_004, 9_005, 9_006):  # quick answers inside the 28-day window
        _failed_then_rerun(npu, frozen_clock, number, hours=1)
    as_of = frozen_clock.advance(days=21)

    gate = promotion.evaluate_backend(npu, as_of=as_of)

    assert gate.evaluation.target_level == "L4"
    (oncall,) = [c for c in gate.evaluation.criteria if c.metric == evaluation.ONCALL_METRIC]
    assert oncall.window_days == 28
    # The three slow answers are in the 31 days the gate reads, but not in the criterion's 28.
    assert (oncall.n, oncall.value) == (3, 1.0)
