"""hud.stats: hand-computed cases for every definition, and property-based invariants."""

import datetime as dt
import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from hud import stats
from hud.stats import frames, intervals, rates

T0 = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
START = T0
END = T0 + dt.timedelta(days=14)
_ids = itertools.count(1)


def job(**fields):
    """One attempt row with sensible defaults; `minutes` places it after T0."""
    minutes = fields.pop("minutes", 0)
    row = {
        "id": next(_ids),
        "downstream": "org/backend",
        "event_type": "pull_request",
        "pr_number": 1,
        "head_sha": "a" * 40,
        "workflow_name": "ci",
        "job_name": "build",
        "run_id": 100,
        "run_attempt": 1,
        "status": "completed",
        "conclusion": "success",
        "placed_at": T0 + dt.timedelta(minutes=minutes),
        "queue_seconds": 60.0,
        "execution_seconds": 600.0,
    }
    row.update(fields)
    return row


def frame(*rows):
    return stats.jobs_frame(rows)


# --------------------------------------------------------------------------- frames


def test_empty_jobs_frame_has_the_contract_columns_and_dtypes():
    empty = stats.empty_jobs_frame()
    assert list(empty.columns) == list(stats.JOB_COLUMNS)
    assert {c: str(t) for c, t in empty.dtypes.items()} == stats.JOB_COLUMNS
    assert stats.pass_rate(empty, START, END).n == 0
    summary = stats.backend_summary(empty, START, END, END)
    assert summary["job_pass_rate"].value is None
    assert summary["days_of_data"] == 0
    assert len(stats.daily_series(empty, START.date(), START.date() + dt.timedelta(days=3))) == 3


def test_jobs_frame_rejects_missing_required_columns():
    with pytest.raises(ValueError, match="placed_at"):
        stats.jobs_frame([{"id": 1, "downstream": "o/r"}])


# A database row of the frame's columns as SQLite's and PostgreSQL's drivers give it: naive
# (SQLite) or aware times, booleans as 0/1 or bool, None wherever the column is nullable.
_TIMES = st.datetimes(dt.datetime(2020, 1, 1), dt.datetime(2030, 1, 1))
_TEXT = st.text(max_size=8)
_DRIVER_VALUES = {
    "id": st.integers(1, 2**40),
    "downstream": _TEXT | st.integers(1, 99),  # a name, or an id (`gate_counts._as_of_jobs`)
    "event_type": st.sampled_from(["pull_request", "push", "nightly"]),
    "pr_number": st.integers(0, 10**6),
    "head_sha": _TEXT,
    "workflow_name": _TEXT,
    "job_name": _TEXT,
    "run_id": st.integers(0, 2**50),
    "run_attempt": st.integers(1, 5),
    "status": st.sampled_from(["queued", "in_progress", "completed"]),
    "conclusion": st.none() | st.sampled_from(["", "success", "failure"]),
    "placed_at": _TIMES | _TIMES.map(lambda t: t.replace(tzinfo=dt.UTC)),
    "in_progress_received_at": st.none() | _TIMES,
    "queue_seconds": st.none() | st.floats(0, 1e6),
    "execution_seconds": st.none() | st.floats(0, 1e6),
    "closed_by_sweeper": st.sampled_from([0, 1, False, True]),
    "ref": st.none() | _TEXT,
    "outcome": st.sampled_from(["success", "superseded"]),
}
_DRIVER_COLUMNS = list(_DRIVER_VALUES)


@given(st.lists(st.fixed_dictionaries(_DRIVER_VALUES), max_size=6), st.booleans())
@example([], False)
def test_rows_frame_types_driver_rows_as_coerce_jobs_frame_does(records, named):
    """The reads build jobs frames of driver rows with `rows_frame`; typed as a frame of the
    same rows through `coerce_jobs_frame`, with the extra column kept after the contract's.
    `named`: the backend's name given as a constant instead of a column of the rows."""
    columns = [c for c in _DRIVER_COLUMNS if not (named and c == "downstream")]
    rows = [tuple(record[c] for c in columns) for record in records]
    constant = {"downstream": "o/r"} if named else {}
    built = stats.rows_frame(rows, columns, **constant)
    raw = pd.DataFrame.from_records(rows, columns=columns).assign(**constant)
    expected = stats.coerce_jobs_frame(raw) if rows else stats.empty_jobs_frame()
    pd.testing.assert_frame_equal(built[list(stats.JOB_COLUMNS)], expected)
    assert list(built.columns) == [*stats.JOB_COLUMNS, "outcome"]
    assert built["outcome"].tolist() == [record["outcome"] for record in records]


def test_rows_frame_rejects_missing_required_columns():
    with pytest.raises(ValueError, match="placed_at"):
        stats.rows_frame([(1, "o/r")], ["id", "downstream"])


# --------------------------------------------------------------------------- Wilson


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [
        (9, 10, 0.5958, 0.9821),
        (50, 100, 0.4038, 0.5962),
        (10, 10, 0.7225, 1.0),
        (0, 10, 0.0, 0.2775),
    ],
)
def test_wilson_interval_matches_known_values(successes, n, low, high):
    got_low, got_high = stats.wilson_interval(successes, n)
    assert round(got_low, 4) == low
    assert round(got_high, 4) == high


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=50))
def test_wilson_intervals_of_many_pairs_are_the_same_floats_as_one_by_one(pairs):
    """The daily tables compute every day's interval at once; a page must not differ in the
    last digit from the one-day figure."""
    pairs = [(min(successes, n), n) for successes, n in pairs]
    successes = np.array([pair[0] for pair in pairs], dtype="int64")
    n = np.array([pair[1] for pair in pairs], dtype="int64")
    low, high = intervals.wilson_intervals(successes, n)
    assert list(zip(low.tolist(), high.tolist(), strict=True)) == [
        stats.wilson_interval(*pair) for pair in pairs
    ]


def _pandas_day_clustered(times, hits, start, end, min_n):
    """The definition, as pandas states it: window counts and per-UTC-day sums and sizes."""
    in_window = (times >= pd.Timestamp(start)) & (times < pd.Timestamp(end))
    lookback = min(pd.Timestamp(start), pd.Timestamp(end) - intervals.SPREAD_LOOKBACK)
    in_lookback = (times >= lookback) & (times < pd.Timestamp(end))
    per_day = (
        hits[in_lookback]
        .astype("int64")
        .groupby(times[in_lookback].dt.floor("D"))
        .agg(["sum", "size"])
    )
    return stats.clustered_proportion(
        int(hits[in_window].sum()),
        int(in_window.sum()),
        per_day["sum"].to_numpy(),
        per_day["size"].to_numpy(),
        min_n=min_n,
    )


@given(
    st.lists(st.tuples(st.integers(-3 * 86_400, 40 * 86_400), st.booleans()), max_size=200),
    st.integers(0, 30),
    st.integers(1, 30),
    st.integers(0, 40),
)
def test_day_clustered_proportion_is_the_pandas_definition_to_the_last_bit(
    units, start_day, days, min_n
):
    """The integer-nanosecond path every rate takes equals the per-day groupby it replaced,
    across midnights, the spread's look-back edge, times before the window and none at all."""
    seconds = [unit[0] for unit in units]
    times = pd.Series(pd.to_datetime([T0 + dt.timedelta(seconds=s) for s in seconds], utc=True))
    hits = pd.Series([unit[1] for unit in units], dtype=bool)
    start = T0 + dt.timedelta(days=start_day, hours=7)
    end = start + dt.timedelta(days=days)
    expected = _pandas_day_clustered(times, hits, start, end, min_n)
    assert stats.day_clustered_proportion(times, hits, start, end, min_n=min_n) == expected
    assert (
        stats.day_clustered_proportion(times.values, hits.to_numpy(), start, end, min_n=min_n)
        == expected
    )


def test_wilson_for_no_data_is_the_whole_unit_interval_and_insufficient():
    assert stats.wilson_interval(0, 0) == (0.0, 1.0)
    estimate = stats.proportion(0, 0)
    assert estimate.value is None
    assert not estimate.sufficient
    assert (estimate.low, estimate.high) == (0.0, 1.0)


def test_proportion_below_min_n_keeps_the_value_but_is_insufficient():
    estimate = stats.proportion(9, 10, min_n=11)
    assert estimate.value == 0.9
    assert not estimate.sufficient
    assert stats.proportion(9, 10, min_n=10).sufficient


def test_wilson_sample_sizes_quoted_in_the_docs_and_policy():
    # All-pass lower bound above 90% first at n = 35; at or above 95% first at n = 73.
    assert stats.wilson_interval(34, 34)[0] < 0.90 < stats.wilson_interval(35, 35)[0]
    assert stats.wilson_interval(72, 72)[0] < 0.95 <= stats.wilson_interval(73, 73)[0]
    # Zero events: upper bound below 1% first at n = 381; at or below 5% first at n = 73.
    assert stats.wilson_interval(0, 380)[1] > 0.01 > stats.wilson_interval(0, 381)[1]
    assert stats.wilson_interval(0, 72)[1] > 0.05 >= stats.wilson_interval(0, 73)[1]


# --------------------------------------------------------------------------- pass rate


def test_superseded_cancel_is_excluded_and_other_cancels_count_against():
    df = frame(
        # PR 1: cancelled on sha a because sha b was pushed later → excluded.
        job(head_sha="a", conclusion="cancelled", minutes=0),
        job(head_sha="b", conclusion="success", run_id=101, minutes=10),
        # PR 2: cancelled with no newer sha → counts against.
        job(pr_number=2, head_sha="c", conclusion="cancelled", run_id=102, minutes=20),
        # PR 3: the newer sha came *before* the cancel → not superseded, counts against.
        job(pr_number=3, head_sha="e", conclusion="success", run_id=103, minutes=25),
        job(pr_number=3, head_sha="d", conclusion="cancelled", run_id=104, minutes=30),
        # PR 4: the other sha placed at the same moment, not after → counts against.
        job(pr_number=4, head_sha="f", conclusion="cancelled", run_id=105, minutes=40),
        job(pr_number=4, head_sha="g", conclusion="success", run_id=106, minutes=40),
        # Pushes (no PR): a later push never supersedes a cancel → counts against.
        job(pr_number=0, head_sha="h", conclusion="cancelled", run_id=107, minutes=50),
        job(pr_number=0, head_sha="i", conclusion="success", run_id=108, minutes=55),
    )
    counts = stats.outcome_counts(df, START, END)
    assert counts.superseded == 1
    assert counts.cancelled == 4
    assert counts.successes == 4
    estimate = stats.pass_rate(df, START, END)
    assert estimate.n == 8
    assert estimate.value == 0.5


def test_skipped_and_neutral_are_excluded_and_timeouts_count_against():
    df = frame(
        job(job_name="a", conclusion="success"),
        job(job_name="b", conclusion="skipped"),
        job(job_name="c", conclusion="neutral"),
        job(job_name="d", conclusion="timed_out"),
        job(job_name="e", conclusion="failure"),
        job(job_name="f", status="in_progress", conclusion=""),
    )
    estimate = stats.pass_rate(df, START, END)
    assert (estimate.value, estimate.n) == (1 / 3, 3)
    timeout = stats.timeout_rate(df, START, END)
    assert (timeout.value, timeout.n) == (1 / 3, 3)


def test_rerun_latest_attempt_decides_and_first_attempt_rate_sees_the_failure():
    df = frame(
        job(run_attempt=1, conclusion="failure", minutes=0),
        job(run_attempt=2, conclusion="success", minutes=30),
        job(job_name="test", conclusion="success", minutes=5),
    )
    assert stats.pass_rate(df, START, END).value == 1.0
    assert stats.pass_rate(df, START, END).n == 2
    assert stats.first_attempt_pass_rate(df, START, END).value == 0.5
    assert stats.rerun_rate(df, START, END).value == 0.5
    latest = stats.latest_attempts(df)
    assert sorted(latest["attempts"]) == [1, 2]


def test_attempt_order_is_run_id_then_run_attempt_then_receipt():
    # Receipt order (id) says attempt 2 arrived first; run_attempt decides.
    second = job(run_attempt=2, conclusion="success", id=5)
    first = job(run_attempt=1, conclusion="failure", id=6)
    latest = stats.latest_attempts(frame(second, first))
    assert latest["conclusion"].tolist() == ["success"]
    # A new run (higher run_id) beats a higher attempt of an older run.
    newer_run = job(run_id=200, run_attempt=1, conclusion="failure", id=7)
    latest = stats.latest_attempts(frame(second, first, newer_run))
    assert latest["conclusion"].tolist() == ["failure"]


def test_window_takes_logical_jobs_by_their_latest_attempt_and_days_add_up():
    df = frame(
        job(head_sha="x", run_attempt=1, conclusion="failure", minutes=60 * 23),
        job(head_sha="x", run_attempt=2, conclusion="success", minutes=60 * 25),
        job(head_sha="y", conclusion="failure", minutes=60 * 30),
        job(head_sha="z", conclusion="success", minutes=60 * 5),
    )
    day1 = stats.pass_rate(df, T0, T0 + dt.timedelta(days=1))
    day2 = stats.pass_rate(df, T0 + dt.timedelta(days=1), T0 + dt.timedelta(days=2))
    both = stats.pass_rate(df, T0, T0 + dt.timedelta(days=2))
    assert (day1.n, day2.n, both.n) == (1, 2, 3)
    series = stats.daily_series(df, T0.date(), T0.date() + dt.timedelta(days=2))
    assert series["n"].tolist() == [1, 2]
    assert series["successes"].sum() == 2
    assert series["failures"].tolist() == [0, 1]
    assert series["runs"].tolist() == [2, 2]
    assert series.loc[1, "pass_rate"] == 0.5
    assert series.loc[1, "low"] == pytest.approx(stats.wilson_interval(1, 2)[0])


# --------------------------------------------------------------------------- legs


@pytest.mark.parametrize("order", ["failing_leg_first", "passing_leg_first"])
def test_an_attempt_is_the_worst_of_its_legs_whichever_reports_last(order):
    failing = job(conclusion="failure", minutes=1)
    passing = job(conclusion="success", minutes=2)
    if order == "passing_leg_first":
        failing["id"], passing["id"] = passing["id"], failing["id"]
    df = frame(failing, passing)  # two legs of run 100 attempt 1, sharing a job name
    latest = stats.latest_attempts(df)
    assert len(latest) == 1
    assert (latest["id"].iloc[0], latest["outcome"].iloc[0]) == (failing["id"], stats.FAILURE)
    assert latest["attempts"].iloc[0] == 1
    assert stats.pass_rate(df, START, END).value == 0.0
    # Legs are not re-runs, and a failing and a passing leg of one attempt are not a flake.
    assert stats.rerun_rate(df, START, END).value == 0.0
    assert stats.flake_rate(df, START, END).value == 0.0


def test_an_attempt_with_a_leg_in_progress_is_not_counted_yet():
    df = frame(job(conclusion="success"), job(status="in_progress", conclusion=""))
    assert stats.latest_attempts(df)["outcome"].iloc[0] == stats.EXCLUDED
    assert stats.pass_rate(df, START, END).n == 0


def test_a_rerun_whose_legs_all_pass_makes_the_logical_job_pass_and_flaky():
    df = frame(
        job(conclusion="failure"),
        job(conclusion="success"),
        job(run_attempt=2, conclusion="success", minutes=30),
        job(run_attempt=2, conclusion="success", minutes=31),
    )
    latest = stats.latest_attempts(df)
    assert (latest["outcome"].iloc[0], latest["attempts"].iloc[0]) == (stats.SUCCESS, 2)
    assert stats.first_attempt_pass_rate(df, START, END).value == 0.0
    assert stats.flake_rate(df, START, END).value == 1.0
    assert stats.rerun_rate(df, START, END).value == 1.0


# --------------------------------------------------------------------------- flakiness


def test_flaky_detection_needs_a_failure_and_a_success_on_one_sha():
    df = frame(
        job(job_name="flaky", run_attempt=1, conclusion="failure"),
        job(job_name="flaky", run_attempt=2, conclusion="success"),
        job(job_name="steady-red", run_attempt=1, conclusion="failure"),
        job(job_name="steady-red", run_attempt=2, conclusion="failure"),
        job(job_name="green", conclusion="success"),
        job(job_name="timeout-then-pass", run_attempt=1, conclusion="timed_out"),
        job(job_name="timeout-then-pass", run_attempt=2, conclusion="success"),
        job(job_name="only-cancelled", conclusion="cancelled"),
        # Same job name on another sha passes: different logical job, not a flake.
        job(job_name="steady-red", head_sha="b", conclusion="success", run_id=300),
    )
    jobs = stats.flaky_jobs(df, START, END)
    assert jobs.loc[jobs["flaky"], "job_name"].tolist() == ["flaky"]
    estimate = stats.flake_rate(df, START, END)
    # Denominator: logical jobs with at least one failure or success (5 of the 6).
    assert (estimate.value, estimate.n) == (1 / 5, 5)


def test_flip_counts_ignore_runs_of_three_or_more_failures():
    p, f = True, False
    # P F P P [F F F] P F F P: flips at the single F and at the double F; the triple is a
    # breakage. After dropping it: P F P P P F F P → transitions out of a pass (P not last): 4.
    assert rates._flip_counts([p, f, p, p, f, f, f, p, f, f, p]) == (2, 4)
    assert rates._flip_counts([f, f, f, f]) == (0, 0)
    assert rates._flip_counts([p, p, p]) == (0, 2)
    assert rates._flip_counts([]) == (0, 0)


def test_flip_rate_uses_trunk_pushes_and_nightly_only():
    outcomes = ["success", "failure", "success", "failure", "failure", "failure", "success"]
    rows = [
        job(
            event_type="push",
            ref="refs/heads/main",
            pr_number=0,
            head_sha=f"t{i}",
            conclusion=c,
            minutes=i * 60,
        )
        for i, c in enumerate(outcomes)
    ]
    rows.append(job(event_type="nightly", pr_number=0, head_sha="n1", minutes=8 * 60))
    rows.append(job(event_type="nightly", pr_number=0, head_sha="n2", conclusion="failure",
                    minutes=9 * 60))  # fmt: skip
    # Not trunk: a release-branch push and a PR, both failing; ignored.
    rows.append(job(event_type="push", ref="refs/heads/release/2.9", pr_number=0,
                    head_sha="r1", conclusion="failure", minutes=10 * 60))  # fmt: skip
    rows.append(job(head_sha="pr", conclusion="failure", minutes=11 * 60))
    series = stats.flip_series(frame(*rows), START, END)
    assert len(series) == 1
    # S F S [F F F dropped] S S(n1) F(n2): kept S F S S S F → flips 2; eligible 4.
    assert series.loc[0, ["points", "flips", "eligible"]].tolist() == [9, 2, 4]
    estimate = stats.flip_rate(frame(*rows), START, END)
    assert (estimate.value, estimate.n) == (0.5, 4)


# --------------------------------------------------------------------------- timing


def test_timing_percentiles_means_and_overrun_by_hand():
    hours = [0.5, 1, 1.5, 2, 2.5, 3.5]  # execution hours, queue 0 except one
    rows = [job(job_name=f"j{i}", queue_seconds=0.0, execution_seconds=h * 3600)
            for i, h in enumerate(hours)]  # fmt: skip
    rows.append(job(job_name="rerun", queue_seconds=np.nan, execution_seconds=3600.0))
    rows.append(job(job_name="swept", conclusion="timed_out", closed_by_sweeper=True,
                    queue_seconds=np.nan, execution_seconds=np.nan))  # fmt: skip
    rows.append(job(job_name="skipped", conclusion="skipped", execution_seconds=0.0))
    rows.append(job(job_name="unknown", queue_seconds=np.nan, execution_seconds=np.nan))
    df = frame(*rows)
    timing = stats.timing_estimates(df, START, END, min_n=5)
    e2e = timing["end_to_end_seconds_p50"]
    # e2e seconds (re-run counts execution only): 0.5 1 1 1.5 2 2.5 3.5 h → median 1.5 h.
    assert e2e.value == 1.5 * 3600
    assert e2e.n == 7
    assert e2e.low <= e2e.value <= e2e.high
    assert timing["execution_seconds_mean"].value == pytest.approx(np.mean([*hours, 1]) * 3600)
    # Overrun: 3.5 h and the swept job of 8 known → 2/8.
    overrun = stats.overrun_rate(df, START, END)
    assert (overrun.value, overrun.n) == (2 / 8, 8)


def test_order_statistic_ranks_by_hand():
    # n = 30, median, B ~ Bin(30, 0.5) values below it: P(B <= 9) = 0.0214 <= 2.5% <
    # P(B <= 10) = 0.0494, so x_(10) is the lower bound; P(B >= 21) = 0.0214, so x_(21) the upper.
    assert stats.order_statistic_ranks(30, 0.5) == (10, 21)
    # P95: no order statistic of 30 values is above it with 97.5% (0.95^30 = 0.215) ...
    assert stats.order_statistic_ranks(30, 0.95) == (26, None)
    # ... the sample maximum is from n = 72 (0.95^72 = 0.0249).
    assert stats.order_statistic_ranks(72, 0.95) == (64, 72)
    assert stats.order_statistic_ranks(71, 0.95)[1] is None


def test_p95_of_a_small_sample_has_no_upper_bound_and_cannot_pass_a_gate_on_it():
    estimate = stats.percentile_estimate(np.arange(1.0, 31.0), 0.95)
    assert estimate.high is None and estimate.low == 26.0


def test_mean_interval_is_order_free_and_skewed_to_the_right():
    values = [float(v) for v in range(1, 41)]
    first = stats.mean_estimate(values)
    assert first == stats.mean_estimate(list(reversed(values)))
    assert first.value == 20.5
    assert first.low < 20.5 < first.high
    assert first.note == "log-scale and t interval"
    large = stats.mean_estimate(np.arange(10_000, dtype=float))
    assert large.low < large.value < large.high
    # Two values this far apart bound nothing: no upper bound rather than an overflow.
    assert stats.mean_estimate([0.0, 20_000.0]).high is None


def test_chi_square_and_student_t_quantiles_match_the_tables():
    table = {1: (0.000982, 5.0239), 2: (0.0506, 7.3778), 10: (3.247, 20.4832), 30: (16.791, 46.979)}
    for df, (low, high) in table.items():
        assert stats.chi2_quantile(df, 0.025) == pytest.approx(low, rel=2e-3)
        assert stats.chi2_quantile(df, 0.975) == pytest.approx(high, rel=2e-3)
    for df, value in {1: 12.7062, 2: 4.3027, 3: 3.1824, 13: 2.1604, 30: 2.0423}.items():
        assert stats.student_t_975(df) == pytest.approx(value, abs=4e-3)


def test_stuck_jobs_and_liveness():
    now = T0 + dt.timedelta(hours=10)
    df = frame(
        job(
            status="in_progress", conclusion="", in_progress_received_at=T0 + dt.timedelta(hours=1)
        ),
        job(
            status="in_progress",
            conclusion="",
            job_name="fresh",
            in_progress_received_at=now - dt.timedelta(minutes=30),
        ),
        job(job_name="done", minutes=60),
    )
    stuck = stats.stuck_jobs(df, now, dt.timedelta(hours=3))
    assert stuck["job_name"].tolist() == ["build"]
    live = stats.liveness(45, 50, T0, now)
    assert live.answered.value == 0.9
    assert live.seconds_since_last_result == 10 * 3600
    summary = stats.backend_summary(df, START, END, now, dispatched=50, answered=45)
    assert summary["stuck_jobs"] == 1
    assert summary["seconds_since_last_result"] == 9 * 3600
    assert summary["liveness"].answered.n == 50


def test_days_of_data_counts_distinct_utc_days_with_a_completed_job():
    df = frame(
        job(minutes=10),
        job(minutes=20, job_name="b"),
        job(minutes=60 * 24 * 3, job_name="c"),
        job(minutes=60 * 24 * 5, job_name="d", status="in_progress", conclusion=""),
    )
    assert stats.days_of_data(df, START, END) == 2


def test_backend_summary_agrees_with_the_single_metric_functions():
    rows = [job(head_sha=f"s{i}", conclusion="failure" if i % 7 == 0 else "success",
                minutes=i * 90, execution_seconds=600.0 + i) for i in range(60)]  # fmt: skip
    df = frame(*rows)
    summary = stats.backend_summary(df, START, END, END)
    assert summary["job_pass_rate"] == stats.pass_rate(df, START, END)
    for name in stats.METRIC_NAMES:
        expected = stats.compute_metric(name, df, START, END)
        got = summary[name]
        if name == "days_of_data":
            assert got == expected.value
        else:
            assert got == expected, name
    with pytest.raises(KeyError):
        stats.compute_metric("nope", df, START, END)


# --------------------------------------------------------------------------- properties

conclusions = st.sampled_from(
    ["success", "failure", "cancelled", "timed_out", "skipped", "neutral", ""]
)


@st.composite
def job_frames(draw):
    n = draw(st.integers(min_value=0, max_value=30))
    rows = []
    for i in range(n):
        conclusion = draw(conclusions)
        rows.append(
            {
                "id": i + 1,
                "downstream": draw(st.sampled_from(["o/a", "o/b"])),
                "event_type": draw(st.sampled_from(["pull_request", "push", "nightly"])),
                "pr_number": draw(st.integers(0, 2)),
                "head_sha": draw(st.sampled_from(["s1", "s2", "s3"])),
                "workflow_name": "ci",
                "job_name": draw(st.sampled_from(["build", "test"])),
                "run_id": draw(st.integers(1, 3)),
                "run_attempt": draw(st.integers(1, 3)),
                "status": "in_progress" if conclusion == "" else "completed",
                "conclusion": conclusion,
                "placed_at": T0 + dt.timedelta(hours=draw(st.integers(0, 24 * 13))),
                "queue_seconds": draw(st.one_of(st.just(math.nan), st.floats(0, 7200))),
                "execution_seconds": draw(st.one_of(st.just(math.nan), st.floats(0, 20000))),
                "closed_by_sweeper": conclusion == "timed_out" and draw(st.booleans()),
                "ref": "refs/heads/main",
            }
        )
    return stats.jobs_frame(rows)


def _comparable(summary):
    return {k: v for k, v in summary.items() if k != "liveness"}


@given(k=st.integers(0, 1000), n=st.integers(1, 1000))
def test_wilson_bounds_contain_the_estimate_and_stay_in_unit_interval(k, n):
    k = min(k, n)
    estimate = stats.proportion(k, n)
    assert 0.0 <= estimate.low <= estimate.value <= estimate.high <= 1.0


@given(k=st.integers(0, 200), n=st.integers(1, 200), factor=st.integers(2, 10))
def test_wilson_interval_widens_as_n_shrinks(k, n, factor):
    k = min(k, n)
    small = stats.wilson_interval(k, n)
    large = stats.wilson_interval(k * factor, n * factor)
    assert small[1] - small[0] > large[1] - large[0]


@given(df=job_frames())
def test_every_rate_is_in_the_unit_interval_and_bounds_contain_values(df):
    summary = stats.backend_summary(df, START, END, END)
    for name in stats.METRIC_NAMES:
        estimate = summary[name]
        if not isinstance(estimate, stats.Estimate) or estimate.value is None:
            continue
        # A bound of None means the data bound nothing on that side.
        assert estimate.low is None or estimate.low <= estimate.value, name
        assert estimate.high is None or estimate.value <= estimate.high, name
        if estimate.unit == "ratio":
            assert estimate.low >= 0.0 and estimate.high <= 1.0, name


@given(df=job_frames(), seed=st.integers(0, 2**32 - 1), repeat=st.integers(0, 10))
def test_duplicates_and_row_order_do_not_change_results(df, seed, repeat):
    # Re-delivered rows (same id) plus a shuffle: every figure and the daily series agree.
    messy = pd.concat([df, df.head(repeat)]).sample(frac=1.0, random_state=seed)
    expected = _comparable(stats.backend_summary(df, START, END, END))
    assert _comparable(stats.backend_summary(messy, START, END, END)) == expected
    pd.testing.assert_frame_equal(
        stats.daily_series(messy, START, END), stats.daily_series(df, START, END)
    )


@given(df=job_frames())
def test_daily_counts_add_up_to_the_window(df):
    series = stats.daily_series(df, START, END)
    counts = stats.outcome_counts(df, START, END)
    assert series["n"].sum() == counts.counted
    assert series["successes"].sum() == counts.successes


def _grouped_attempt_info(rows):
    """The attempt columns as pandas' groupby states them (the definition `prepare` keeps)."""
    rows = rows.sort_values([*stats.LOGICAL_JOB_KEY, *stats.ATTEMPT_ORDER], kind="mergesort")
    key = frames.ATTEMPT_KEY
    starts = (rows[key] != rows[key].shift()).any(axis=1).astype(int)
    by_job = [rows[column] for column in stats.LOGICAL_JOB_KEY]
    index = starts.groupby(by_job, sort=False).cumsum() - 1
    legs = rows.assign(
        severity=rows["conclusion"].map(frames.LEG_SEVERITY).fillna(0).astype(int),
        open=rows["status"] != "completed",
    ).groupby([rows[column] for column in key], sort=False)
    return rows.assign(
        attempt_index=index,
        attempts=index.groupby(by_job, sort=False).transform("max") + 1,
        latest_placed_at=rows.groupby(by_job, sort=False)["placed_at"].transform("last"),
        attempt_severity=legs["severity"].transform("max"),
        attempt_open=legs["open"].transform("any"),
    )


def _grouped_worst_legs(legs):
    """One row per logical job, its worst leg (then latest id), as a groupby states it."""
    ranked = legs.assign(severity=legs["conclusion"].map(frames.LEG_SEVERITY).fillna(0))
    worst = (
        ranked.sort_values([*stats.LOGICAL_JOB_KEY, "severity", "id"], kind="mergesort")
        .groupby(stats.LOGICAL_JOB_KEY, sort=False)
        .tail(1)
        .drop(columns="severity")
    )
    still_open = worst["attempt_open"].to_numpy()
    worst = worst.assign(
        status=np.where(still_open, "in_progress", worst["status"]),
        conclusion=np.where(still_open, "", worst["conclusion"]),
    )
    return worst.sort_values([*stats.LOGICAL_JOB_KEY, *stats.ATTEMPT_ORDER], kind="mergesort")


@given(df=job_frames(), seed=st.integers(0, 2**32 - 1))
def test_attempts_latest_and_first_are_what_grouping_by_logical_job_gives(df, seed):
    """`prepare` numbers attempts and picks worst legs on runs of sorted rows with numpy; the
    frames equal, value for value and dtype for dtype, what pandas' groupby gives."""
    prepared = stats.prepare(df.sample(frac=1.0, random_state=seed))
    attempts = _grouped_attempt_info(prepared.rows)
    pd.testing.assert_frame_equal(prepared.attempts, attempts, check_exact=True)
    for field, chosen in (
        ("latest", attempts["attempt_index"] == attempts["attempts"] - 1),
        ("first", attempts["attempt_index"] == 0),
    ):
        worst = _grouped_worst_legs(attempts[chosen])
        got = getattr(prepared, field).drop(columns="outcome")
        expected = worst.drop(columns=["attempt_index", "attempt_severity", "attempt_open"])
        pd.testing.assert_frame_equal(got, expected.reset_index(drop=True), check_exact=True)


@given(df=job_frames(), seed=st.integers(0, 2**32 - 1))
def test_flaky_jobs_are_what_grouping_the_window_attempts_by_logical_job_gives(df, seed):
    """`flaky_jobs` reduces runs of each logical job's attempts; the jobs and their flags equal
    pandas' groupby of the same attempts (the definition), whatever the rows' order."""
    attempts = stats.prepare(df.sample(frac=1.0, random_state=seed)).attempts
    attempts = attempts[
        (attempts["latest_placed_at"] >= START) & (attempts["latest_placed_at"] < END)
    ]
    completed = ~attempts["attempt_open"]
    expected = (
        attempts.assign(
            is_failure=completed & (attempts["attempt_severity"] == frames.LEG_SEVERITY["failure"]),
            is_success=completed & (attempts["attempt_severity"] == frames.LEG_SEVERITY["success"]),
        )
        .groupby(stats.LOGICAL_JOB_KEY, sort=True)
        .agg(
            has_failure=("is_failure", "any"),
            has_success=("is_success", "any"),
            attempts=("attempts", "last"),
            placed_at=("latest_placed_at", "last"),
        )
    )
    expected = expected.assign(
        flaky=expected["has_failure"] & expected["has_success"]
    ).reset_index()
    got = stats.flaky_jobs(df, START, END).sort_values(stats.LOGICAL_JOB_KEY, kind="mergesort")
    pd.testing.assert_frame_equal(got.reset_index(drop=True), expected, check_exact=True)


@given(
    st.lists(
        st.tuples(
            st.integers(-24 * 60, 4 * 24 * 60),  # minutes from T0: some before and after
            st.sampled_from(["success", "failure", "cancelled", "skipped", "timed_out"]),
            st.sampled_from(["completed", "completed", "in_progress"]),
            st.one_of(st.none(), st.floats(0, 50_000)),  # execution seconds, unknown or not
            st.one_of(st.none(), st.floats(0, 5_000)),  # queue seconds
            st.integers(0, 3),  # which logical job
        ),
        min_size=8,
        max_size=40,
    )
)
# One day whose median and mean differ (200 against 400), an unknown duration, a day left empty,
# and attempts just outside the three days on either side.
@example(
    [(60, "success", "completed", 100.0, 10.0, 0), (120, "failure", "completed", 200.0, None, 1)]
    + [(180, "success", "completed", 900.0, 5.0, 2), (240, "success", "completed", None, 1.0, 3)]
    + [(2 * 24 * 60 + 5, "timed_out", "completed", 50.0, 0.0, k) for k in range(4)]
    + [
        (3 * 24 * 60, "failure", "completed", 70.0, 0.0, 0),
        (-1, "success", "completed", 80.0, 0.0, 1),
    ]
)
def test_daily_series_is_each_days_own_figures(attempts):
    """Each day's row is what the window of that day alone gives: the pass rate and its counts,
    the timed attempts' runs, means and medians (unknown durations left out)."""
    df = frame(
        *(
            job(
                minutes=minutes,
                conclusion=conclusion if status == "completed" else "",
                status=status,
                execution_seconds=execution,
                queue_seconds=queue,
                head_sha=f"{key:040x}",
                run_id=100 + index,
            )
            for index, (minutes, conclusion, status, execution, queue, key) in enumerate(attempts)
        )
    )
    series = stats.daily_series(df, T0.date(), T0.date() + dt.timedelta(days=3))
    assert len(series) == 3
    prepared = stats.prepare(df)
    for day, row in zip(range(3), series.itertuples(), strict=True):
        start = T0 + dt.timedelta(days=day)
        end = start + dt.timedelta(days=1)
        counts = stats.outcome_counts(prepared, start, end)
        assert (row.n, row.successes, row.timed_out) == (
            counts.counted,
            counts.successes,
            counts.timed_out,
        )
        timed = stats.timed_attempts(prepared, start, end)
        assert row.runs == len(timed)
        for values, mean, median in (
            (timed["execution_seconds"], row.mean_execution_seconds, row.p50_execution_seconds),
            (
                stats.end_to_end_seconds(timed),
                row.mean_end_to_end_seconds,
                row.p50_end_to_end_seconds,
            ),
        ):
            known = values.dropna()
            if known.empty:
                assert math.isnan(mean) and math.isnan(median)
            else:
                assert mean == pytest.approx(known.mean(), rel=1e-12)
                assert median == pytest.approx(known.median(), rel=1e-12)


@given(
    start=st.datetimes(
        min_value=dt.datetime(2025, 1, 1),
        max_value=dt.datetime(2027, 1, 1),
        timezones=st.just(dt.UTC),
    ),
    length=st.timedeltas(min_value=dt.timedelta(microseconds=1), max_value=dt.timedelta(days=95)),
    offset=st.sampled_from([0, 2, -5]),
)
@example(start=dt.datetime(2026, 11, 1, tzinfo=dt.UTC), length=dt.timedelta(days=7), offset=0)
@example(
    start=dt.datetime(2026, 11, 1, 23, 59, tzinfo=dt.UTC), length=dt.timedelta(minutes=1), offset=0
)
def test_utc_dates_are_the_day_index_days(start, length, offset):
    """The rollups' days without pandas are `day_index`'s, whatever the zone of the bounds
    and wherever they fall (a midnight end touches no day of its own)."""
    zone = dt.timezone(dt.timedelta(hours=offset))
    begin, end = start.astimezone(zone), (start + length).astimezone(zone)

    assert stats.utc_dates(begin, end) == [day.date() for day in stats.day_index(begin, end)]
