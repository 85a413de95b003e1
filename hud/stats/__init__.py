"""Reliability statistics for CRCR backends: one definition of each figure, with its interval.

Pure pandas/numpy: no Django models, no ORM. Every page, API endpoint and gate computes its
numbers through these functions, so the summary, the backend page and the gate cannot
disagree (pytorch/test-infra #8833). `docs/statistics.md` gives every formula by hand.

Conventions used throughout:
- The input is a *jobs frame*: one row per attempt (see `JOB_COLUMNS`). Rows are
  de-duplicated by `id` and every ordering ends in `id`, so row order and duplicated rows
  never change a result.
- A *logical job* is `LOGICAL_JOB_KEY`; its attempts are ordered by `(run_id, run_attempt,
  id)` and the last one is its *latest* attempt.
- A window is half-open `[start, end)`. A logical job belongs to a window when its latest
  attempt's `placed_at` falls in it, so windows partition logical jobs and daily counts add up
  to the window's count. Timing figures are per attempt (each attempt used a runner), by the
  attempt's own `placed_at`. For an "as of" evaluation, drop rows placed after it first
  (`as_of`).
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import math
from collections.abc import Iterable, Mapping
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
# exp() of more than this overflows a float.
MAX_LOG_SECONDS = 709.0
OVERRUN_SECONDS = 3 * 3600.0
DEFAULT_STUCK_AFTER = dt.timedelta(hours=3)
TRUNK_REF = "refs/heads/main"
# A run of this many consecutive failures is a real breakage, not a flip (TestGrid's rule).
BREAKAGE_RUN = 3

JOB_COLUMNS: dict[str, str] = {
    "id": "int64",
    "downstream": "object",
    "event_type": "object",
    "pr_number": "int64",
    "head_sha": "object",
    "workflow_name": "object",
    "job_name": "object",
    "run_id": "int64",
    "run_attempt": "int64",
    "status": "object",
    "conclusion": "object",
    "placed_at": "datetime64[ns, UTC]",
    "in_progress_received_at": "datetime64[ns, UTC]",
    "queue_seconds": "float64",
    "execution_seconds": "float64",
    "closed_by_sweeper": "bool",
    "ref": "object",
}
LOGICAL_JOB_KEY = ["downstream", "event_type", "head_sha", "workflow_name", "job_name"]
ATTEMPT_ORDER = ["run_id", "run_attempt", "id"]
# Rows of one logical job sharing run_id and run_attempt are the legs of one attempt.
ATTEMPT_KEY = [*LOGICAL_JOB_KEY, "run_id", "run_attempt"]
# Worst first when an attempt's legs disagree; skipped, neutral and unfinished rank below all.
LEG_SEVERITY = {"failure": 4, "timed_out": 3, "cancelled": 2, "success": 1}

_DEFAULTS: dict[str, Any] = {
    "event_type": "pull_request",
    "pr_number": 0,
    "head_sha": "",
    "workflow_name": "",
    "job_name": "",
    "run_id": 0,
    "run_attempt": 1,
    "status": "completed",
    "conclusion": "",
    "in_progress_received_at": pd.NaT,
    "queue_seconds": np.nan,
    "execution_seconds": np.nan,
    "closed_by_sweeper": False,
    "ref": "",
}

# Outcome classes of one attempt, for every pass-rate-like figure.
SUCCESS = "success"
FAILURE = "failure"
TIMED_OUT = "timed_out"
CANCELLED = "cancelled"
SUPERSEDED = "superseded"
EXCLUDED = "excluded"
COUNTED = (SUCCESS, FAILURE, TIMED_OUT, CANCELLED)
# The class of a completed attempt by its conclusion; skipped, neutral and unfinished are excluded.
CONCLUSION_OUTCOMES = {
    "success": SUCCESS,
    "failure": FAILURE,
    "timed_out": TIMED_OUT,
    "cancelled": CANCELLED,
}


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


@dataclass(frozen=True)
class OutcomeCounts:
    """How the logical jobs of a window were classified for the pass rate."""

    successes: int = 0
    failures: int = 0
    timed_out: int = 0
    cancelled: int = 0
    superseded: int = 0
    excluded: int = 0

    @property
    def counted(self) -> int:
        """The pass-rate denominator: success, failure, timed_out and unsuperseded cancels."""
        return self.successes + self.failures + self.timed_out + self.cancelled

    @property
    def against(self) -> int:
        """Everything counted that is not a success."""
        return self.counted - self.successes


# --------------------------------------------------------------------------- frames


def empty_jobs_frame() -> pd.DataFrame:
    """An empty jobs frame with the contract's columns and dtypes."""
    return pd.DataFrame({col: pd.Series(dtype=dtype) for col, dtype in JOB_COLUMNS.items()})


def jobs_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Build a jobs frame from dicts, filling optional columns and coercing the dtypes."""
    records = [{**_DEFAULTS, **row} for row in rows]
    if not records:
        return empty_jobs_frame()
    frame = pd.DataFrame.from_records(records)
    missing = [c for c in JOB_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"jobs frame is missing required columns: {missing}")
    return coerce_jobs_frame(frame)


def coerce_jobs_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Return `df` with the contract's columns in order and dtypes (extra columns dropped)."""
    out = pd.DataFrame(index=df.index)
    for col, dtype in JOB_COLUMNS.items():
        series = df[col]
        if dtype.startswith("datetime"):
            out[col] = pd.to_datetime(series, utc=True)
        elif dtype == "object":
            out[col] = series.fillna("").astype(str)
        elif dtype == "bool":
            out[col] = series.fillna(False).astype(bool)
        else:
            out[col] = series.astype(dtype)
    return out.reset_index(drop=True)


def _clean(df: pd.DataFrame) -> pd.DataFrame:
    # Duplicated deliveries of the same row (same id) count once; sorting by id makes every
    # later step independent of the caller's row order.
    return df.drop_duplicates(subset="id", keep="last").sort_values("id", kind="mergesort")


def as_of(df: pd.DataFrame, moment: dt.datetime) -> pd.DataFrame:
    """The jobs frame as it was known at `moment`: rows placed before it."""
    if isinstance(df, PreparedJobs):
        df = df.rows
    return df[df["placed_at"] < pd.Timestamp(moment)]


def _in_window(times: pd.Series, start: dt.datetime, end: dt.datetime) -> pd.Series:
    return (times >= pd.Timestamp(start)) & (times < pd.Timestamp(end))


# --------------------------------------------------------------------------- attempts


def _with_attempt_info(rows: pd.DataFrame) -> pd.DataFrame:
    """Clean rows by logical job then attempt order, with what each row's attempt amounts to.

    Rows of one logical job with the same (run_id, run_attempt) are legs of one attempt (CRCR.md
    "Legs vs attempts"): they share `attempt_index`; `attempts` counts attempts, not legs;
    `attempt_severity` is the worst leg's `LEG_SEVERITY` and `attempt_open` whether any leg of
    the attempt is still in progress.
    """
    rows = rows.sort_values([*LOGICAL_JOB_KEY, *ATTEMPT_ORDER], kind="mergesort")
    starts_attempt = (rows[ATTEMPT_KEY] != rows[ATTEMPT_KEY].shift()).any(axis=1).astype(int)
    by_job = [rows[column] for column in LOGICAL_JOB_KEY]
    attempt_index = starts_attempt.groupby(by_job, sort=False).cumsum() - 1
    legs = rows.assign(
        severity=rows["conclusion"].map(LEG_SEVERITY).fillna(0).astype(int),
        open=rows["status"] != "completed",
    ).groupby([rows[column] for column in ATTEMPT_KEY], sort=False)
    return rows.assign(
        attempt_index=attempt_index,
        attempts=attempt_index.groupby(by_job, sort=False).transform("max") + 1,
        latest_placed_at=rows.groupby(by_job, sort=False)["placed_at"].transform("last"),
        attempt_severity=legs["severity"].transform("max"),
        attempt_open=legs["open"].transform("any"),
    )


def _attempt_outcome(legs: pd.DataFrame) -> pd.DataFrame:
    """One row per logical job from the legs of one of its attempts: the worst leg stands for it.

    An attempt's conclusion is the worst of its legs (failure > timed_out > cancelled > success),
    and it is complete only when every leg that reported is, so a passing leg that reports last
    never hides a failing one.
    """
    rows = legs.assign(severity=legs["conclusion"].map(LEG_SEVERITY).fillna(0))
    worst = (
        rows.sort_values([*LOGICAL_JOB_KEY, "severity", "id"], kind="mergesort")
        .groupby(LOGICAL_JOB_KEY, sort=False, dropna=False)
        .tail(1)
        .drop(columns="severity")
    )
    still_open = worst["attempt_open"].to_numpy()
    worst = worst.assign(
        status=np.where(still_open, "in_progress", worst["status"]),
        conclusion=np.where(still_open, "", worst["conclusion"]),
    )
    return worst.sort_values([*LOGICAL_JOB_KEY, *ATTEMPT_ORDER], kind="mergesort")


@dataclass(frozen=True, eq=False)
class PreparedJobs:
    """A jobs frame cleaned, ordered and classified once; every metric accepts it instead."""

    rows: pd.DataFrame  # de-duplicated by id, sorted by id
    attempts: pd.DataFrame  # by logical job and attempt order, with attempt_index, attempts
    latest: pd.DataFrame  # latest attempt per logical job, with `outcome`
    first: pd.DataFrame  # first attempt per logical job, with `outcome` and latest_placed_at


Jobs = pd.DataFrame | PreparedJobs


def prepare(df: Jobs) -> PreparedJobs:
    """Clean, order and classify a jobs frame once, to compute many metrics from it."""
    if isinstance(df, PreparedJobs):
        return df
    rows = _clean(df)
    attempts = _with_attempt_info(rows)
    latest = _attempt_outcome(attempts[attempts["attempt_index"] == attempts["attempts"] - 1])
    first = _attempt_outcome(attempts[attempts["attempt_index"] == 0])
    attempt_columns = ["attempt_index", "attempt_severity", "attempt_open"]
    latest = latest.drop(columns=attempt_columns).reset_index(drop=True)
    first = first.drop(columns=attempt_columns).reset_index(drop=True)
    return PreparedJobs(
        rows=rows,
        attempts=attempts,
        latest=latest.assign(outcome=classify(latest, rows)),
        first=first.assign(outcome=classify(first, rows)),
    )


def latest_attempts(df: Jobs) -> pd.DataFrame:
    """One row per logical job: its latest attempt, with `attempts` and `outcome` columns."""
    return prepare(df).latest


def first_attempts(df: Jobs) -> pd.DataFrame:
    """One row per logical job: its first attempt (lowest run_id, run_attempt, id)."""
    return prepare(df).first


def _superseded(rows: pd.DataFrame, universe: pd.DataFrame) -> pd.Series:
    """For each row: another row of the same downstream and PR, other head SHA, placed later."""
    result = pd.Series(False, index=rows.index)
    candidates = rows[(rows["pr_number"] != 0)]
    if candidates.empty:
        return result
    per_sha = (
        universe[universe["pr_number"] != 0]
        .groupby(["downstream", "pr_number", "head_sha"], sort=True)["placed_at"]
        .max()
        .reset_index()
        .sort_values(["downstream", "pr_number", "placed_at", "head_sha"], kind="mergesort")
    )
    # For each PR keep the two SHAs seen last: the latest other SHA of any row is one of them.
    top = per_sha.groupby(["downstream", "pr_number"], sort=False).tail(2)
    top = top.assign(rank=top.groupby(["downstream", "pr_number"]).cumcount(ascending=False))
    first = top[top["rank"] == 0].rename(columns={"head_sha": "sha1", "placed_at": "t1"})
    second = top[top["rank"] == 1].rename(columns={"head_sha": "sha2", "placed_at": "t2"})
    merged = (
        candidates[["downstream", "pr_number", "head_sha", "placed_at"]]
        .reset_index()
        .merge(first.drop(columns="rank"), on=["downstream", "pr_number"], how="left")
        .merge(second.drop(columns="rank"), on=["downstream", "pr_number"], how="left")
    )
    other_latest = merged["t1"].where(merged["sha1"] != merged["head_sha"], merged["t2"])
    flags = (other_latest > merged["placed_at"]).fillna(False).astype(bool)
    result.loc[merged["index"].to_numpy()] = flags.to_numpy()
    return result


def outcome_class(status: str, conclusion: str, superseded: bool) -> str:
    """Outcome class of one attempt; `superseded`: a row of the same backend and PR with
    another head SHA was placed after it (the rule `classify` applies to a whole frame)."""
    if status != "completed":
        return EXCLUDED
    outcome = CONCLUSION_OUTCOMES.get(conclusion, EXCLUDED)
    return SUPERSEDED if outcome == CANCELLED and superseded else outcome


def classify(rows: pd.DataFrame, universe: pd.DataFrame) -> pd.Series:
    """Outcome class of each attempt row for pass rates (superseded judged against `universe`)."""
    completed = rows["status"] == "completed"
    outcome = rows["conclusion"].map(CONCLUSION_OUTCOMES).where(completed).fillna(EXCLUDED)
    outcome = outcome.astype(object)
    cancelled = outcome == CANCELLED
    if cancelled.any():
        superseded = _superseded(rows[cancelled], universe)
        outcome[cancelled] = np.where(superseded.to_numpy(), SUPERSEDED, CANCELLED)
    return outcome


def classified_latest(df: Jobs) -> pd.DataFrame:
    """Latest attempt per logical job with an `outcome` column (see `classify`)."""
    return prepare(df).latest


def _counts(outcomes: pd.Series) -> OutcomeCounts:
    tally = outcomes.value_counts()
    return OutcomeCounts(
        successes=int(tally.get(SUCCESS, 0)),
        failures=int(tally.get(FAILURE, 0)),
        timed_out=int(tally.get(TIMED_OUT, 0)),
        cancelled=int(tally.get(CANCELLED, 0)),
        superseded=int(tally.get(SUPERSEDED, 0)),
        excluded=int(tally.get(EXCLUDED, 0)),
    )


# --------------------------------------------------------------------------- intervals


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
    times: pd.Series,
    hits: pd.Series,
    start: dt.datetime,
    end: dt.datetime,
    *,
    min_n: int = DEFAULT_MIN_N,
    note: str = "",
) -> Estimate:
    """Share of `hits` among the units placed in [start, end), with a day-clustered interval.

    The spread is estimated over UTC days on the `SPREAD_LOOKBACK` days ending at `end`, so
    `times` and `hits` should reach back that far (`clustered_proportion` gives the interval).
    """
    in_window = _in_window(times, start, end)
    lookback_start = min(pd.Timestamp(start), pd.Timestamp(end) - SPREAD_LOOKBACK)
    in_lookback = _in_window(times, lookback_start, end)
    per_day = (
        hits[in_lookback]
        .astype("int64")
        .groupby(times[in_lookback].dt.floor("D"))
        .agg(["sum", "size"])
    )
    return clustered_proportion(
        int(hits[in_window].sum()),
        int(in_window.sum()),
        per_day["sum"].to_numpy(),
        per_day["size"].to_numpy(),
        min_n=min_n,
        note=note,
    )


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
    return np.sort(np.asarray(pd.Series(values, dtype="float64").dropna(), dtype="float64"))


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


def order_statistic_ranks(n: int, q: float) -> tuple[int | None, int | None]:
    """1-based ranks (l, u) with P(x_(l) > q-quantile) and P(x_(u) < it) each at most 2.5%.

    Exact (binomial), so None where no order statistic of n values reaches that confidence: the
    upper bound of a P95 needs n >= 72 (0.95^72 < 0.025), the lower one n >= 72 as well.
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


# --------------------------------------------------------------------------- pass rates


def _window_latest(classified: pd.DataFrame, start: dt.datetime, end: dt.datetime) -> pd.DataFrame:
    return classified[_in_window(classified["placed_at"], start, end)]


def outcome_counts(df: Jobs, start: dt.datetime, end: dt.datetime) -> OutcomeCounts:
    """Classification counts of the logical jobs whose latest attempt is in the window."""
    return _counts(_window_latest(prepare(df).latest, start, end)["outcome"])


def _pass_rate_from_counts(counts: OutcomeCounts, min_n: int) -> Estimate:
    # One day's pass rate (daily series): a single cluster, so the plain Wilson interval.
    return proportion(counts.successes, counts.counted, min_n=min_n, note=_excluded_note(counts))


def _excluded_note(counts: OutcomeCounts) -> str:
    return f"{counts.superseded} superseded cancels and {counts.excluded} skipped/neutral excluded"


def _share_of_counted(
    jobs: pd.DataFrame,
    when: str,
    outcome: str,
    start: dt.datetime,
    end: dt.datetime,
    min_n: int,
    note: str = "",
) -> Estimate:
    """Share of `outcome` among the counted logical jobs placed (by `when`) in the window."""
    counted = jobs[jobs["outcome"].isin(COUNTED)]
    return day_clustered_proportion(
        counted[when], counted["outcome"] == outcome, start, end, min_n=min_n, note=note
    )


def pass_rate(
    df: Jobs, start: dt.datetime, end: dt.datetime, *, min_n: int = DEFAULT_MIN_N
) -> Estimate:
    """Job pass rate: successes / counted latest attempts of the window's logical jobs."""
    latest = prepare(df).latest
    note = _excluded_note(_counts(_window_latest(latest, start, end)["outcome"]))
    return _share_of_counted(latest, "placed_at", SUCCESS, start, end, min_n, note)


def timeout_rate(
    df: Jobs, start: dt.datetime, end: dt.datetime, *, min_n: int = DEFAULT_MIN_N
) -> Estimate:
    """Share of counted latest attempts that timed out (same denominator as the pass rate)."""
    return _share_of_counted(prepare(df).latest, "placed_at", TIMED_OUT, start, end, min_n)


def first_attempt_pass_rate(
    df: Jobs, start: dt.datetime, end: dt.datetime, *, min_n: int = DEFAULT_MIN_N
) -> Estimate:
    """Pass rate of each window logical job's first attempt (what a re-run would have hidden)."""
    return _share_of_counted(prepare(df).first, "latest_placed_at", SUCCESS, start, end, min_n)


def rerun_rate(
    df: Jobs, start: dt.datetime, end: dt.datetime, *, min_n: int = DEFAULT_MIN_N
) -> Estimate:
    """Share of the window's completed logical jobs that have more than one attempt."""
    latest = prepare(df).latest
    completed = latest[latest["status"] == "completed"]
    return day_clustered_proportion(
        completed["placed_at"], completed["attempts"] > 1, start, end, min_n=min_n
    )


# --------------------------------------------------------------------------- flakiness


def flaky_jobs(df: Jobs, start: dt.datetime, end: dt.datetime) -> pd.DataFrame:
    """Window logical jobs with `has_failure`, `has_success` and `flaky` (both) columns."""
    attempts = prepare(df).attempts
    attempts = attempts[_in_window(attempts["latest_placed_at"], start, end)]
    # Judged by attempt (the worst of its legs), so two legs of one attempt are not a flake.
    completed = ~attempts["attempt_open"]
    attempts = attempts.assign(
        is_failure=completed & (attempts["attempt_severity"] == LEG_SEVERITY[FAILURE]),
        is_success=completed & (attempts["attempt_severity"] == LEG_SEVERITY[SUCCESS]),
    )
    per_job = attempts.groupby(LOGICAL_JOB_KEY, sort=True).agg(
        has_failure=("is_failure", "any"),
        has_success=("is_success", "any"),
        attempts=("attempts", "last"),
        placed_at=("latest_placed_at", "last"),
    )
    return per_job.assign(flaky=per_job["has_failure"] & per_job["has_success"]).reset_index()


def flake_rate(
    df: Jobs, start: dt.datetime, end: dt.datetime, *, min_n: int = DEFAULT_MIN_N
) -> Estimate:
    """Flaky logical jobs / logical jobs with at least one failed or successful attempt."""
    lookback_start = min(pd.Timestamp(start), pd.Timestamp(end) - SPREAD_LOOKBACK)
    jobs = flaky_jobs(df, lookback_start, end)
    eligible = jobs[jobs["has_failure"] | jobs["has_success"]]
    return day_clustered_proportion(
        eligible["placed_at"], eligible["flaky"], start, end, min_n=min_n
    )


def _flip_counts(outcomes: list[bool]) -> tuple[int, int]:
    """(flips, eligible transitions) of one pass(True)/fail(False) series, oldest first."""
    # Drop failures in runs of >= BREAKAGE_RUN: they are breakages. The points on either side
    # of a dropped run are passes, so dropping never merges two short failure runs.
    kept: list[bool] = []
    i = 0
    while i < len(outcomes):
        j = i
        while j < len(outcomes) and outcomes[j] == outcomes[i]:
            j += 1
        if outcomes[i] or j - i < BREAKAGE_RUN:
            kept.extend(outcomes[i:j])
        i = j
    flips = sum(1 for a, b in itertools.pairwise(kept) if a and not b)
    eligible = sum(1 for a in kept[:-1] if a)
    return flips, eligible


def flip_series(df: Jobs, start: dt.datetime, end: dt.datetime) -> pd.DataFrame:
    """Per (downstream, workflow, job) trunk+nightly series: points, flips, eligible."""
    classified = prepare(df).latest
    trunk = (classified["event_type"] == "push") & (classified["ref"] == TRUNK_REF)
    nightly = classified["event_type"] == "nightly"
    points = classified[
        (trunk | nightly)
        & classified["outcome"].isin([SUCCESS, FAILURE, TIMED_OUT])
        & _in_window(classified["placed_at"], start, end)
    ].sort_values(["placed_at", "id"], kind="mergesort")
    records = []
    for key, series in points.groupby(["downstream", "workflow_name", "job_name"], sort=True):
        flips, eligible = _flip_counts((series["outcome"] == SUCCESS).tolist())
        records.append((*key, len(series), flips, eligible))
    return pd.DataFrame(
        records,
        columns=["downstream", "workflow_name", "job_name", "points", "flips", "eligible"],
    )


def flip_rate(
    df: Jobs, start: dt.datetime, end: dt.datetime, *, min_n: int = DEFAULT_MIN_N
) -> Estimate:
    """TestGrid-style flip rate: pass→fail flips / transitions out of a pass, breakages ignored."""
    series = flip_series(df, start, end)
    return proportion(
        int(series["flips"].sum()),
        int(series["eligible"].sum()),
        min_n=min_n,
        note="trunk pushes and nightly; failure runs of >= 3 ignored",
    )


# --------------------------------------------------------------------------- timing


def timed_attempts(df: Jobs, start: dt.datetime, end: dt.datetime) -> pd.DataFrame:
    """Completed, not skipped attempts placed in the window: the population of timing figures."""
    rows = _timed(df)
    return rows[_in_window(rows["placed_at"], start, end)]


def _timed(df: Jobs) -> pd.DataFrame:
    rows = prepare(df).rows
    # A skipped job never used a runner; its ~0 s would drag the averages down.
    return rows[(rows["status"] == "completed") & (rows["conclusion"] != "skipped")]


def end_to_end_seconds(rows: pd.DataFrame) -> pd.Series:
    """Queue + execution seconds; execution alone when queue time is unknown (re-runs)."""
    queue = rows["queue_seconds"]
    execution = rows["execution_seconds"]
    return execution + queue.fillna(0.0).where(execution.notna())


def overrun_flags(rows: pd.DataFrame) -> pd.Series:
    """True over 3 h end to end, False under, NA when unknown; sweeper-closed jobs overran."""
    e2e = end_to_end_seconds(rows)
    flags = pd.Series(pd.NA, index=rows.index, dtype="boolean")
    known = e2e.notna()
    flags[known] = e2e[known] > OVERRUN_SECONDS
    # The sweeper closes jobs left in_progress for 6 h, so they ran past 3 h by construction.
    flags[rows["closed_by_sweeper"].astype(bool)] = True
    return flags


def overrun_rate(
    df: Jobs, start: dt.datetime, end: dt.datetime, *, min_n: int = DEFAULT_MIN_N
) -> Estimate:
    """Share of timed attempts over 3 h end to end (attempts with unknown duration excluded)."""
    lookback_start = min(pd.Timestamp(start), pd.Timestamp(end) - SPREAD_LOOKBACK)
    rows = timed_attempts(df, lookback_start, end)
    flags = overrun_flags(rows)
    known = flags.notna()
    return day_clustered_proportion(
        rows.loc[known, "placed_at"], flags[known].astype(bool), start, end, min_n=min_n
    )


def timing_estimates(
    df: Jobs, start: dt.datetime, end: dt.datetime, *, min_n: int = DEFAULT_MIN_N
) -> dict[str, Estimate]:
    """Mean, P50 and P95 of queue, execution and end-to-end seconds over the window."""
    rows = timed_attempts(df, start, end)
    series = {
        "queue_seconds": rows["queue_seconds"],
        "execution_seconds": rows["execution_seconds"],
        "end_to_end_seconds": end_to_end_seconds(rows),
    }
    out: dict[str, Estimate] = {}
    for name, values in series.items():
        out[f"{name}_mean"] = mean_estimate(values, min_n=min_n)
        out[f"{name}_p50"] = percentile_estimate(values, 0.5, min_n=min_n)
        out[f"{name}_p95"] = percentile_estimate(values, 0.95, min_n=min_n)
    return out


def stuck_jobs(
    df: Jobs, now: dt.datetime, threshold: dt.timedelta = DEFAULT_STUCK_AFTER
) -> pd.DataFrame:
    """Attempts still in_progress longer than `threshold` at `now` (since in_progress receipt)."""
    rows = prepare(df).rows
    rows = rows[rows["status"] == "in_progress"]
    since = rows["in_progress_received_at"].fillna(rows["placed_at"])
    return rows[since < pd.Timestamp(now) - pd.Timedelta(threshold)]


@dataclass(frozen=True)
class Liveness:
    """Share of dispatches to an L2+ backend that got any callback, and time since the last."""

    answered: Estimate
    seconds_since_last_result: float | None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return {
            "answered": self.answered.to_dict(),
            "seconds_since_last_result": self.seconds_since_last_result,
        }


def liveness(
    answered: int,
    dispatched: int,
    last_result_at: dt.datetime | None,
    now: dt.datetime,
    *,
    min_n: int = DEFAULT_MIN_N,
) -> Liveness:
    """Liveness from counts the caller has (answered ≤ dispatched) and the last result time."""
    answered = min(answered, dispatched)
    since = None if last_result_at is None else (now - last_result_at).total_seconds()
    return Liveness(proportion(answered, dispatched, min_n=min_n), since)


def last_result_at(df: Jobs) -> dt.datetime | None:
    """placed_at of the most recent completed attempt, or None."""
    df = prepare(df).rows
    done = df.loc[df["status"] == "completed", "placed_at"]
    return None if done.empty else done.max().to_pydatetime()


def days_of_data(df: Jobs, start: dt.datetime, end: dt.datetime) -> int:
    """Distinct UTC days with at least one completed job placed in the window."""
    df = prepare(df).rows
    rows = df[(df["status"] == "completed") & _in_window(df["placed_at"], start, end)]
    return int(rows["placed_at"].dt.floor("D").nunique())


# --------------------------------------------------------------------------- series and bundles


def day_index(start: dt.date | dt.datetime, end: dt.date | dt.datetime) -> pd.DatetimeIndex:
    """The UTC midnights of the days that [start, end) touches."""
    first = pd.Timestamp(start)
    last = pd.Timestamp(end)
    first = first.tz_localize("UTC") if first.tzinfo is None else first.tz_convert("UTC")
    last = last.tz_localize("UTC") if last.tzinfo is None else last.tz_convert("UTC")
    return pd.date_range(first.floor("D"), last.ceil("D"), freq="D", inclusive="left")


DAILY_COLUMNS = [
    "day",
    "pass_rate",
    "low",
    "high",
    "n",
    "sufficient",
    "successes",
    "failures",
    "timed_out",
    "runs",
    "mean_execution_seconds",
    "p50_execution_seconds",
    "mean_end_to_end_seconds",
    "p50_end_to_end_seconds",
]


def daily_series(
    df: Jobs,
    start: dt.date | dt.datetime,
    end: dt.date | dt.datetime,
    *,
    min_n: int = DEFAULT_MIN_N,
) -> pd.DataFrame:
    """One row per UTC day in [start, end): the pass rate (same function), counts, durations."""
    days = day_index(start, end)
    df = prepare(df)
    classified = df.latest
    # Tally outcomes by day once rather than filtering per day: O(N), not O(days x N).
    if classified.empty:
        tally = pd.DataFrame(index=days)
    else:
        tally = pd.crosstab(classified["placed_at"].dt.floor("D"), classified["outcome"])
    timed = _timed(df)
    timed = timed.assign(e2e=end_to_end_seconds(timed), day=timed["placed_at"].dt.floor("D"))
    durations = timed.groupby("day").agg(
        runs=("id", "size"),
        mean_execution_seconds=("execution_seconds", "mean"),
        p50_execution_seconds=("execution_seconds", "median"),
        mean_end_to_end_seconds=("e2e", "mean"),
        p50_end_to_end_seconds=("e2e", "median"),
    )
    return daily_frame(days, tally, durations, min_n=min_n)


def daily_frame(
    days: pd.DatetimeIndex,
    tally: pd.DataFrame,
    durations: pd.DataFrame,
    *,
    min_n: int = DEFAULT_MIN_N,
) -> pd.DataFrame:
    """The rows of `daily_series` from per-day outcome counts (columns `COUNTED`, superseded,
    excluded) and per-day durations (runs, means and medians), both indexed by day."""
    columns = [*COUNTED, SUPERSEDED, EXCLUDED]
    tally = tally.reindex(index=days, columns=columns, fill_value=0).astype(int)
    durations = durations.reindex(days)
    records = []
    for day, row in zip(days, tally.itertuples(index=False, name=None), strict=True):
        counts = OutcomeCounts(*row[:4], superseded=row[4], excluded=row[5])
        estimate = _pass_rate_from_counts(counts, min_n)
        records.append(
            {
                "day": day.date(),
                "pass_rate": np.nan if estimate.value is None else estimate.value,
                "low": estimate.low,
                "high": estimate.high,
                "n": estimate.n,
                "sufficient": estimate.sufficient,
                "successes": counts.successes,
                "failures": counts.against,
                "timed_out": counts.timed_out,
            }
        )
    out = pd.DataFrame.from_records(records, columns=DAILY_COLUMNS[:9])
    durations = durations.reset_index(drop=True).fillna({"runs": 0}).astype({"runs": "int64"})
    return pd.concat([out, durations], axis=1)[DAILY_COLUMNS]


METRIC_NAMES = (
    "job_pass_rate",
    "first_attempt_pass_rate",
    "rerun_rate",
    "timeout_rate",
    "flake_rate",
    "flip_rate",
    "overrun_rate",
    "queue_seconds_mean",
    "queue_seconds_p50",
    "queue_seconds_p95",
    "execution_seconds_mean",
    "execution_seconds_p50",
    "execution_seconds_p95",
    "end_to_end_seconds_mean",
    "end_to_end_seconds_p50",
    "end_to_end_seconds_p95",
    "days_of_data",
)


def exact_count(value: int, unit: str = "count") -> Estimate:
    """A count known exactly (days of data, days at level): no interval, always sufficient."""
    return Estimate(float(value), float(value), float(value), int(value), True, unit, "exact")


def compute_metric(
    name: str,
    df: Jobs,
    start: dt.datetime,
    end: dt.datetime,
    *,
    min_n: int = DEFAULT_MIN_N,
) -> Estimate:
    """Compute one named metric (see `METRIC_NAMES`) over [start, end)."""
    proportions = {
        "job_pass_rate": pass_rate,
        "first_attempt_pass_rate": first_attempt_pass_rate,
        "rerun_rate": rerun_rate,
        "timeout_rate": timeout_rate,
        "flake_rate": flake_rate,
        "flip_rate": flip_rate,
        "overrun_rate": overrun_rate,
    }
    if name in proportions:
        return proportions[name](df, start, end, min_n=min_n)
    if name == "days_of_data":
        return exact_count(days_of_data(df, start, end), "days")
    if name.startswith(("queue_seconds_", "execution_seconds_", "end_to_end_seconds_")):
        rows = timed_attempts(df, start, end)
        base, _, stat = name.rpartition("_")
        values = end_to_end_seconds(rows) if base == "end_to_end_seconds" else rows[base]
        if stat == "mean":
            return mean_estimate(values, min_n=min_n)
        if stat in ("p50", "p95"):
            return percentile_estimate(values, int(stat[1:]) / 100, min_n=min_n)
    raise KeyError(f"unknown metric {name!r}; known: {', '.join(METRIC_NAMES)}")


def backend_summary(
    df: Jobs,
    window_start: dt.datetime,
    window_end: dt.datetime,
    now: dt.datetime,
    *,
    min_n: int = DEFAULT_MIN_N,
    stuck_after: dt.timedelta = DEFAULT_STUCK_AFTER,
    dispatched: int | None = None,
    answered: int | None = None,
) -> dict[str, Any]:
    """Every metric for one backend's jobs frame over one window, keyed by metric name."""
    df = prepare(df)
    counts = outcome_counts(df, window_start, window_end)
    summary: dict[str, Any] = {
        "job_pass_rate": pass_rate(df, window_start, window_end, min_n=min_n),
        "timeout_rate": timeout_rate(df, window_start, window_end, min_n=min_n),
        "first_attempt_pass_rate": first_attempt_pass_rate(
            df, window_start, window_end, min_n=min_n
        ),
        "rerun_rate": rerun_rate(df, window_start, window_end, min_n=min_n),
        "flake_rate": flake_rate(df, window_start, window_end, min_n=min_n),
        "flip_rate": flip_rate(df, window_start, window_end, min_n=min_n),
        "overrun_rate": overrun_rate(df, window_start, window_end, min_n=min_n),
        **timing_estimates(df, window_start, window_end, min_n=min_n),
        "days_of_data": days_of_data(df, window_start, window_end),
        "counts": counts,
        "stuck_jobs": len(stuck_jobs(df, now, stuck_after)),
        "last_result_at": last_result_at(df),
    }
    last = summary["last_result_at"]
    summary["seconds_since_last_result"] = None if last is None else (now - last).total_seconds()
    if dispatched is not None and answered is not None:
        summary["liveness"] = liveness(answered, dispatched, last, now, min_n=min_n)
    return summary
