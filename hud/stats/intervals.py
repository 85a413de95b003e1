"""Estimates and their 95% intervals: Wilson, day-clustered, mean and percentile.

`Estimate` is one figure with its interval, sample size and whether n suffices to show it.
The distributions they need (Student's t, chi-square, binomial) are computed here by hand
(docs/statistics.md gives every formula).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

# Two-sided 95%: the 0.975 quantile of the standard normal.
Z95 = 1.959963984540054
DEFAULT_MIN_N = 10
# CI failures come in clusters (a bad day): a rate's day-to-day spread is estimated over the
# 28 days ending with its window (or the window, if longer), so a 14-day window's interval
# does not rest on 13 degrees of freedom alone (docs/statistics.md, "Correlated failures").
SPREAD_LOOKBACK = dt.timedelta(days=28)
_DAY_NS = 86_400 * 10**9  # a UTC day in nanoseconds
# exp() of more than this overflows a float.
MAX_LOG_SECONDS = 709.0


@dataclass(frozen=True)
class Estimate:
    """One figure with its 95% interval, sample size and whether n is enough to show it."""

    value: float | None
    low: float | None
    high: float | None
    n: int
    sufficient: bool
    unit: str = ""
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (API, evidence snapshots)."""
        return asdict(self)


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """95% Wilson score interval for successes/n; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # Clamp rounding noise so the bounds stay in [0, 1] and contain p.
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def wilson_intervals(successes: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`wilson_interval` of many (successes, n) pairs at once, the same operations in the same
    order, so every bound is the same float; (0, 1) where n is 0."""
    known = n > 0
    n = np.where(known, n, 1)
    z = Z95
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = np.maximum(0.0, np.minimum(p, centre - half))
    high = np.minimum(1.0, np.maximum(p, centre + half))
    return np.where(known, low, 0.0), np.where(known, high, 1.0)


def proportion(
    successes: int, n: int, *, min_n: int = DEFAULT_MIN_N, unit: str = "ratio", note: str = ""
) -> Estimate:
    """A proportion with its Wilson interval; insufficient below `min_n`."""
    if n <= 0:
        return Estimate(None, 0.0, 1.0, 0, False, unit, note or "no data")
    low, high = wilson_interval(successes, n)
    return Estimate(successes / n, low, high, n, n >= min_n, unit, note)


def student_t_975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom (exact for 1 and 2).

    From df = 3 the Cornish-Fisher expansion in 1/df (Abramowitz & Stegun 26.7.5) is within
    0.004 of the table (3.1786 for 3.1824) and within 1e-4 from df = 10.
    """
    if df < 1:
        raise ValueError("df must be >= 1")
    if df == 1:
        return 12.706204736174707
    if df == 2:
        return 4.302652729749464
    z = Z95
    terms = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    )
    return z + sum(term / df**power for power, term in enumerate(terms, start=1))


def _chi2_cdf(x: float, df: int) -> float:
    """P(χ²_df <= x): the regularized lower incomplete gamma function, by its power series."""
    if x <= 0:
        return 0.0
    a, half = df / 2, x / 2
    term = total = 1.0 / a
    k = 0
    while term > total * 1e-15:
        k += 1
        term *= half / (a + k)
        total += term
    return math.exp(a * math.log(half) - half - math.lgamma(a)) * total


@functools.lru_cache(maxsize=4096)
def chi2_quantile(df: int, p: float) -> float:
    """The p-quantile of the chi-square distribution with `df` degrees of freedom.

    Bisection on the exact CDF below 30 df; from 30 the Wilson-Hilferty cube (within 0.1%).
    """
    if df >= 30:
        z = NormalDist().inv_cdf(p)
        return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    low, high = 0.0, df + 20.0 * math.sqrt(2.0 * df) + 20.0
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if _chi2_cdf(middle, df) < p else (low, middle)
    return (low + high) / 2


def design_effect(hits: np.ndarray, sizes: np.ndarray) -> tuple[float, int] | None:
    """(variance inflation, degrees of freedom) of a proportion whose units come in clusters.

    `hits[i]` of `sizes[i]` units fell in cluster i (a UTC day). The cluster-robust variance of
    the ratio estimate, D/(D−1) Σ(hits − p̂·sizes)² / N², over the binomial p̂(1−p̂)/N. None
    when it cannot be estimated: fewer than two clusters, or p̂ of 0 or 1 (no spread to see).
    """
    sizes = np.asarray(sizes, dtype="float64")
    hits = np.asarray(hits, dtype="float64")
    clusters = int((sizes > 0).sum())
    total = sizes.sum()
    if clusters < 2:
        return None
    rate = hits.sum() / total
    if rate <= 0.0 or rate >= 1.0:
        return None
    clustered = clusters / (clusters - 1) * float(((hits - rate * sizes) ** 2).sum()) / total**2
    return clustered / (rate * (1 - rate) / total), clusters - 1


def day_clustered_proportion(
    times: pd.Series | np.ndarray,
    hits: pd.Series | np.ndarray,
    start: dt.datetime,
    end: dt.datetime,
    *,
    min_n: int = DEFAULT_MIN_N,
    note: str = "",
) -> Estimate:
    """Share of `hits` among the units placed in [start, end), with a day-clustered interval.

    `times` (UTC) and `hits` (booleans) go position by position. The spread is estimated over
    UTC days on the `SPREAD_LOOKBACK` days ending at `end`, so `times` and `hits` should reach
    back that far (`clustered_proportion` gives the interval). Computed on integer nanoseconds:
    every rate of every page and gate passes here, and pandas' per-call cost was most of it.
    """
    ns = _epoch_ns(times)
    hit = np.asarray(hits, dtype=bool)
    end_ns = pd.Timestamp(end).value
    start_ns = pd.Timestamp(start).value
    lookback_ns = min(start_ns, (pd.Timestamp(end) - SPREAD_LOOKBACK).value)
    in_window = (ns >= start_ns) & (ns < end_ns)
    in_lookback = (ns >= lookback_ns) & (ns < end_ns)
    # UTC days (floor division floors before 1970 too), ascending as a groupby would give them.
    _, day = np.unique(ns[in_lookback] // _DAY_NS, return_inverse=True)
    return clustered_proportion(
        int(np.count_nonzero(hit & in_window)),
        int(np.count_nonzero(in_window)),
        np.bincount(day, weights=hit[in_lookback]).astype(np.int64),
        np.bincount(day).astype(np.int64),
        min_n=min_n,
        note=note,
    )


def _epoch_ns(times: pd.Series | np.ndarray) -> np.ndarray:
    """Nanoseconds since the epoch of UTC times (a tz-aware Series' values are UTC)."""
    values = times.values if isinstance(times, pd.Series) else np.asarray(times)
    if values.dtype.kind != "M":  # Timestamps as objects, or an empty object column
        values = pd.to_datetime(values, utc=True).values
    return values.astype("datetime64[ns]", copy=False).view(np.int64)


def clustered_proportion(
    successes: int,
    n: int,
    day_hits: np.ndarray,
    day_sizes: np.ndarray,
    *,
    min_n: int = DEFAULT_MIN_N,
    note: str = "",
) -> Estimate:
    """successes/n with the Wilson interval at n / design effect of the days' spread, t quantile.

    `day_hits`/`day_sizes` are the per-day counts the spread is estimated on (see
    `day_clustered_proportion`); plain Wilson when the days vary no more than independent jobs
    would (design effect <= 1) or no spread can be seen.
    """
    if n <= 0:
        return proportion(0, 0, min_n=min_n, note=note)
    spread = design_effect(day_hits, day_sizes)
    if spread is None or spread[0] <= 1.0:
        # Days no more alike than independent jobs: never claim more than binomial precision.
        return proportion(successes, n, min_n=min_n, note=note)
    inflation, df = spread
    effective = n / inflation
    low, high = wilson_interval(successes / n * effective, effective, student_t_975(df))
    clustered = f"day-clustered interval (design effect {inflation:.2f}, {df} df)"
    return Estimate(
        successes / n,
        low,
        high,
        n,
        n >= min_n,
        "ratio",
        f"{note}; {clustered}" if note else clustered,
    )


def _values(values: Iterable[float] | pd.Series) -> np.ndarray:
    """The values without the missing ones, sorted (an array skips building a Series)."""
    if not isinstance(values, np.ndarray):
        values = pd.Series(values, dtype="float64").to_numpy()
    values = np.asarray(values, dtype="float64")
    return np.sort(values[~np.isnan(values)])


def mean_estimate(
    values: Iterable[float] | pd.Series, *, min_n: int = DEFAULT_MIN_N, unit: str = "seconds"
) -> Estimate:
    """Mean with a 95% interval that holds on skewed (log-normal-like) and symmetric durations.

    The union of two intervals: on y = log(1 + x), whose mean gives exp(μ + σ²/2) − 1, the
    MOVER combination (Zou & Donner) of a t interval for μ and a chi-square one for σ²/2; and
    Student's t on x itself. Whichever of the two models the durations follow, the union
    covers at least as often as that model's interval (docs/statistics.md has the figures).
    """
    arr = _values(values)
    n = arr.size
    if n == 0:
        return Estimate(None, None, None, 0, False, unit, "no data")
    mean = float(arr.mean())
    if n == 1:
        return Estimate(mean, mean, mean, 1, min_n <= 1, unit, "single value")
    df = n - 1
    t_half = student_t_975(df) * float(arr.std(ddof=1)) / math.sqrt(n)
    logs = np.log1p(np.clip(arr, 0.0, None))
    centre, variance = float(logs.mean()), float(logs.var(ddof=1))
    location = student_t_975(df) * math.sqrt(variance / n)
    half_low = variance / 2 - df * variance / (2 * chi2_quantile(df, 0.975))
    half_high = df * variance / (2 * chi2_quantile(df, 0.025)) - variance / 2
    low = math.expm1(centre + variance / 2 - math.hypot(location, half_low))
    top = centre + variance / 2 + math.hypot(location, half_high)
    # So few or so spread values bound nothing a float can hold: no upper bound at all.
    high = max(math.expm1(top), mean + t_half) if top < MAX_LOG_SECONDS else None
    return Estimate(
        mean, min(low, mean - t_half), high, n, n >= min_n, unit, "log-scale and t interval"
    )


def _binomial_cdf(n: int, q: float) -> np.ndarray:
    """P(B <= j) for j = 0..n, B ~ Binomial(n, q), from log-pmfs (stable for large n)."""
    j = np.arange(n + 1)
    log_choose = np.array(
        [math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) for k in j]
    )
    log_pmf = log_choose + j * math.log(q) + (n - j) * math.log1p(-q)
    return np.cumsum(np.exp(log_pmf))


@functools.lru_cache(maxsize=4096)
def order_statistic_ranks(n: int, q: float) -> tuple[int | None, int | None]:
    """1-based ranks (l, u) with P(x_(l) > q-quantile) and P(x_(u) < it) each at most 2.5%.

    Exact (binomial), so None where no order statistic of n values reaches that confidence: the
    upper bound of a P95 needs n >= 72 (0.95^72 < 0.025), the lower one n >= 72 as well.
    Kept per (n, q): n + 1 log-gammas each, 250 times on a summary of 50 backends, whose
    sample sizes change far less often than the page is read.
    """
    cdf = _binomial_cdf(n, q)
    # x_(l) <= quantile unless fewer than l values fall below it: P(B <= l - 1) <= 2.5%.
    lows = np.flatnonzero(cdf <= 0.025)
    # x_(u) >= quantile unless at least u values fall below it: P(B >= u) = 1 - cdf[u-1].
    highs = np.flatnonzero(1.0 - cdf[:-1] <= 0.025)
    low = int(lows[-1]) + 1 if lows.size else None
    high = int(highs[0]) + 1 if highs.size else None
    return low, high


def percentile_estimate(
    values: Iterable[float] | pd.Series,
    q: float,
    *,
    min_n: int = DEFAULT_MIN_N,
    unit: str = "seconds",
) -> Estimate:
    """The q-quantile (linear interpolation) with an exact distribution-free interval.

    A bound no order statistic can give at 97.5% (a P95's upper bound below n = 72) is None,
    so a gate deciding on it says insufficient data rather than trusting the sample maximum.
    """
    arr = _values(values)
    n = arr.size
    if n == 0:
        return Estimate(None, None, None, 0, False, unit, "no data")
    value = float(np.quantile(arr, q))
    low_rank, high_rank = order_statistic_ranks(n, q)
    low = None if low_rank is None else min(float(arr[low_rank - 1]), value)
    high = None if high_rank is None else max(float(arr[high_rank - 1]), value)
    return Estimate(value, low, high, n, n >= min_n, unit, "order-statistic interval")


def exact_count(value: int, unit: str = "count") -> Estimate:
    """A count known exactly (days of data, days at level): no interval, always sufficient."""
    return Estimate(float(value), float(value), float(value), int(value), True, unit, "exact")
