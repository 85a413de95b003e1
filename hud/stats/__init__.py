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

Where each figure lives (every public name is re-exported here, so `stats.X` is the way in):
- `frames`: the jobs frame contract, `prepare`/`PreparedJobs`, attempts and legs.
- `outcomes`: outcome classes, supersession, `OutcomeCounts`.
- `intervals`: `Estimate`, Wilson and day-clustered proportions, mean and percentile intervals.
- `rates`: pass, timeout, first-attempt, re-run, flake and flip rates.
- `timing`: queue, execution and end-to-end seconds; overruns.
- `health`: stuck jobs, liveness, last result, days of data.
- `daily`: the daily series the charts draw.
- `metrics`: metrics by name (`compute_metric`) and one backend's bundle (`backend_summary`).
"""

from hud.stats.daily import (
    DAILY_COLUMNS,
    DURATION_COLUMNS,
    daily_columns,
    daily_series,
    day_index,
    utc_dates,
)
from hud.stats.frames import (
    ATTEMPT_KEY,
    ATTEMPT_ORDER,
    JOB_COLUMNS,
    LEG_SEVERITY,
    LOGICAL_JOB_KEY,
    Jobs,
    PreparedJobs,
    as_of,
    classified_latest,
    coerce_jobs_frame,
    combine_prepared,
    empty_jobs_frame,
    first_attempts,
    jobs_frame,
    latest_attempts,
    prepare,
    prepare_single_rows,
    rows_frame,
)
from hud.stats.health import (
    DEFAULT_STUCK_AFTER,
    MIN_RESULTS_FOR_GAP,
    USUAL_GAP_QUANTILE,
    Liveness,
    days_of_data,
    is_stuck,
    last_result_at,
    liveness,
    stuck_jobs,
    stuck_mask,
    usual_gap_seconds,
)
from hud.stats.intervals import (
    DEFAULT_MIN_N,
    MAX_LOG_SECONDS,
    SPREAD_LOOKBACK,
    Z95,
    Estimate,
    chi2_quantile,
    clustered_proportion,
    day_clustered_proportion,
    design_effect,
    exact_count,
    mean_estimate,
    order_statistic_ranks,
    percentile_estimate,
    proportion,
    student_t_975,
    wilson_interval,
)
from hud.stats.metrics import (
    METRIC_NAMES,
    backend_summary,
    compute_metric,
)
from hud.stats.outcomes import (
    CANCELLED,
    CONCLUSION_OUTCOMES,
    COUNTED,
    EXCLUDED,
    FAILURE,
    SUCCESS,
    SUPERSEDED,
    TIMED_OUT,
    OutcomeCounts,
    classify,
    is_superseded,
    outcome_class,
)
from hud.stats.rates import (
    BREAKAGE_RUN,
    TRUNK_REF,
    first_attempt_pass_rate,
    flake_rate,
    flaky_jobs,
    flip_rate,
    flip_rate_of_series,
    flip_series,
    flip_series_of_latest,
    outcome_counts,
    pass_rate,
    pass_rate_of_counts,
    rerun_rate,
    timeout_rate,
)
from hud.stats.timing import (
    OVERRUN_SECONDS,
    end_to_end_seconds,
    overrun_flags,
    overrun_rate,
    timed_attempts,
    timing_estimates,
)

__all__ = [
    "ATTEMPT_KEY",
    "ATTEMPT_ORDER",
    "BREAKAGE_RUN",
    "CANCELLED",
    "CONCLUSION_OUTCOMES",
    "COUNTED",
    "DAILY_COLUMNS",
    "DEFAULT_MIN_N",
    "DEFAULT_STUCK_AFTER",
    "DURATION_COLUMNS",
    "EXCLUDED",
    "FAILURE",
    "JOB_COLUMNS",
    "LEG_SEVERITY",
    "LOGICAL_JOB_KEY",
    "MAX_LOG_SECONDS",
    "METRIC_NAMES",
    "MIN_RESULTS_FOR_GAP",
    "OVERRUN_SECONDS",
    "SPREAD_LOOKBACK",
    "SUCCESS",
    "SUPERSEDED",
    "TIMED_OUT",
    "TRUNK_REF",
    "USUAL_GAP_QUANTILE",
    "Z95",
    "Estimate",
    "Jobs",
    "Liveness",
    "OutcomeCounts",
    "PreparedJobs",
    "as_of",
    "backend_summary",
    "chi2_quantile",
    "classified_latest",
    "classify",
    "clustered_proportion",
    "coerce_jobs_frame",
    "combine_prepared",
    "compute_metric",
    "daily_columns",
    "daily_series",
    "day_clustered_proportion",
    "day_index",
    "days_of_data",
    "design_effect",
    "empty_jobs_frame",
    "end_to_end_seconds",
    "exact_count",
    "first_attempt_pass_rate",
    "first_attempts",
    "flake_rate",
    "flaky_jobs",
    "flip_rate",
    "flip_rate_of_series",
    "flip_series",
    "flip_series_of_latest",
    "is_stuck",
    "is_superseded",
    "jobs_frame",
    "last_result_at",
    "latest_attempts",
    "liveness",
    "mean_estimate",
    "order_statistic_ranks",
    "outcome_class",
    "outcome_counts",
    "overrun_flags",
    "overrun_rate",
    "pass_rate",
    "pass_rate_of_counts",
    "percentile_estimate",
    "prepare",
    "prepare_single_rows",
    "proportion",
    "rerun_rate",
    "rows_frame",
    "stuck_jobs",
    "stuck_mask",
    "student_t_975",
    "timed_attempts",
    "timeout_rate",
    "timing_estimates",
    "usual_gap_seconds",
    "utc_dates",
    "wilson_interval",
]
