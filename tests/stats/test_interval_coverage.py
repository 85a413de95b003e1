"""Coverage of hud.stats' 95% intervals and the promotion error rate, by seeded simulation.

Small enough for the normal suite; each test prints its figures (docs/statistics.md quotes
them). Nominal two-sided coverage is 95%: the intervals must land within 93-97%.
"""

import datetime as dt
import math

import numpy as np
import pandas as pd

from hud import gates, stats

DAYS = 28  # the spread lookback (stats.SPREAD_LOOKBACK) ending with a 14-day window
WINDOW = 14
JOBS_PER_DAY = 40


def _daily_rates(rng, days: int, rate: float, spread: float) -> np.ndarray:
    """Each day's true pass rate: `rate`, or Beta-distributed around it with sd `spread`."""
    if spread == 0:
        return np.full(days, rate)
    strength = rate * (1 - rate) / spread**2 - 1
    return rng.beta(rate * strength, (1 - rate) * strength, days)


def _window_rate(jobs: np.ndarray, passes: np.ndarray) -> stats.Estimate:
    """The gate's pass rate over the last 14 days, spread estimated on all given days."""
    window = slice(-WINDOW, None)
    return stats.clustered_proportion(
        int(passes[window].sum()), int(jobs[window].sum()), passes, jobs
    )


def _rate_coverage(rate: float, spread: float, runs: int = 1500, seed: int = 7) -> float:
    rng = np.random.default_rng(seed)
    covered = 0
    for _ in range(runs):
        jobs = rng.poisson(JOBS_PER_DAY, DAYS)
        passes = rng.binomial(jobs, _daily_rates(rng, DAYS, rate, spread))
        estimate = _window_rate(jobs, passes)
        covered += estimate.low <= rate <= estimate.high
    return covered / runs


def test_pass_rate_interval_covers_on_independent_and_clustered_days():
    figures = {
        "iid, 90%": _rate_coverage(0.90, 0.0),
        "iid, 97%": _rate_coverage(0.97, 0.0),
        "day spread 5 points, 90%": _rate_coverage(0.90, 0.05),
        "day spread 5 points, 88%": _rate_coverage(0.88, 0.05),
    }
    print("pass-rate coverage:", {name: f"{value:.1%}" for name, value in figures.items()})
    for name, value in figures.items():
        assert 0.93 <= value <= 0.97, (name, value)


def test_plain_wilson_undercovers_clustered_days():
    """What the day clustering fixes: the binomial interval on the same clustered data."""
    rng = np.random.default_rng(7)
    covered, runs = 0, 1500
    for _ in range(runs):
        jobs = rng.poisson(JOBS_PER_DAY, WINDOW)
        passes = rng.binomial(jobs, _daily_rates(rng, WINDOW, 0.90, 0.05))
        low, high = stats.wilson_interval(int(passes.sum()), int(jobs.sum()))
        covered += low <= 0.90 <= high
    print(f"plain Wilson on clustered days: {covered / runs:.1%}")
    assert covered / runs < 0.85


def test_day_clustered_proportion_reads_the_days_of_a_frame():
    """The frame path production uses equals the count path the simulations use."""
    rng = np.random.default_rng(3)
    jobs = rng.poisson(JOBS_PER_DAY, DAYS)
    passes = rng.binomial(jobs, _daily_rates(rng, DAYS, 0.9, 0.05))
    end = pd.Timestamp("2026-11-01", tz="UTC")
    days = end - pd.to_timedelta(np.arange(DAYS, 0, -1), unit="D")
    times = pd.Series(np.repeat(days, jobs) + pd.Timedelta(hours=5))
    hits = pd.Series(np.concatenate([np.arange(n) < k for n, k in zip(jobs, passes, strict=True)]))
    start = end - dt.timedelta(days=WINDOW)
    estimate = stats.day_clustered_proportion(times, hits, start, end.to_pydatetime())
    assert estimate == _window_rate(jobs, passes)
    assert "day-clustered" in estimate.note


def _lognormal(rng, mean: float, sigma: float, n: int) -> np.ndarray:
    return rng.lognormal(math.log(mean) - sigma**2 / 2, sigma, n)


def _coverage(draw, estimate, truth: float, runs: int = 1500, seed: int = 11):
    rng = np.random.default_rng(seed)
    inside = above = 0
    for _ in range(runs):
        result = estimate(draw(rng))
        high = math.inf if result.high is None else result.high
        inside += result.low <= truth <= high
        above += truth <= high
    return inside / runs, above / runs


def test_mean_interval_covers_on_symmetric_and_log_normal_durations():
    mean = stats.mean_estimate
    figures = {
        f"{name}, n = {n}": _coverage(lambda rng, n=n, draw=draw: draw(rng, n), mean, 1800.0)
        for n in (30, 60)
        for name, draw in {
            "normal": lambda rng, n: rng.normal(1800, 300, n),
            "log-normal σ = 1": lambda rng, n: _lognormal(rng, 1800, 1.0, n),
        }.items()
    }
    print(
        "mean coverage (two-sided, upper bound):",
        {name: f"{both:.1%}, {upper:.1%}" for name, (both, upper) in figures.items()},
    )
    for name, (both, upper) in figures.items():
        # The gate decides "< 1800 s" on the upper bound: it must hold 97.5% ± 2 points.
        assert 0.955 <= upper <= 0.995, (name, upper)
        if name.startswith("normal"):
            assert 0.93 <= both <= 0.97, (name, both)
        else:
            assert both >= 0.93, (name, both)  # the t side of the union is conservative here


def test_percentile_interval_covers_on_log_normal_durations():
    sigma, median = 1.0, 3600.0
    p95 = median * math.exp(sigma * 1.6448536269514722)
    figures = {}
    for q, truth, n in ((0.5, median, 100), (0.95, p95, 200)):
        figures[f"P{round(q * 100)}, n = {n}"] = _coverage(
            lambda rng, n=n: rng.lognormal(math.log(median), sigma, n),
            lambda values, q=q: stats.percentile_estimate(values, q),
            truth,
        )
    print("percentile coverage:", {name: f"{both:.1%}" for name, (both, _) in figures.items()})
    # Exact order statistics cover at least 95%; the binomial's steps add up to ~2 points at
    # small n (a median at n = 60: 97.3%), so the check uses sizes past the first steps.
    for name, (both, _) in figures.items():
        assert 0.93 <= both <= 0.97, (name, both)


DECISION = {gates.PASS: gates.ELIGIBLE, gates.FAIL: gates.NOT_ELIGIBLE}


def _promoted(rate: float, spread: float, seed: int, days: int = 180) -> bool:
    """A backend evaluated daily for `days`: does the published decision ever become eligible?

    Only the pass rate is in question (the other L3 criteria clear), so each day's decision is
    the L3 job_pass_rate criterion's check; k = 3 consecutive days as in the shipped policy.
    """
    rng = np.random.default_rng(seed)
    total = days + DAYS
    jobs = rng.poisson(JOBS_PER_DAY, total)
    passes = rng.binomial(jobs, _daily_rates(rng, total, rate, spread))
    policy = gates.load_policy()
    criterion = next(c for c in policy.promotion_criteria("L3") if c.metric == "job_pass_rate")
    on, decisions = [], []
    first = dt.date(2026, 1, 1)
    for day in range(DAYS, total):
        estimate = _window_rate(jobs[day - DAYS : day], passes[day - DAYS : day])
        status = gates.check(criterion, estimate).status
        on.append(first + dt.timedelta(days=day))
        decisions.append(DECISION.get(status, gates.INSUFFICIENT))
    published = gates.published_decisions(on, decisions, policy.k_consecutive, gates.INSUFFICIENT)
    return gates.ELIGIBLE in published


def test_a_backend_two_points_below_the_line_is_rarely_promoted():
    seeds = range(100)
    figures = {
        spread: sum(_promoted(0.88, spread, seed) for seed in seeds) / len(seeds)
        for spread in (0.0, 0.05)
    }
    print(
        "P(promoted within 180 days | true 88%, line 90%):",
        {f"day spread {spread:.0%}": f"{value:.1%}" for spread, value in figures.items()},
    )
    for value in figures.values():
        assert value <= 0.05
