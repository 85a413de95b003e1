"""What each HUD page shows: rows from `hud.reads.selectors`, every number from `hud.stats`.

The views parse the query string, call one function here and render. Nothing here computes a
figure a second way: pass rates, counts, timings and stuck jobs are `hud.stats` results on the
frame `selectors.jobs_frame` loads for the page's window, so the summary and the backend page
agree by construction (pytorch/test-infra #8833). The small additions that `hud.stats` has no
notion of (staleness, matrix layout, expected-but-silent backends) are defined here once.

One module per page (each public name is re-exported here, so `pages.X` is the way in):
- `common`: the window, a backend's state, display statuses, staleness, badges.
- `overview`: `/crcr`, the summary (backend rows, the nightly tab, the relay probe's card).
- `matrices`: the backend page's rows × job columns, paging, pins, compact groups.
- `backend`: `/crcr/<org>/<repo>` (stat cards, gate, gate history, charts, failed tests).
- `results`: what the PR and commit pages share (jobs per backend, silent dispatches).
- `pr`: `/crcr/pr/<n>` (gate, check runs, answers) and its embed (`pr_summary`).
- `commit`: `/crcr/commit/<sha>` and the cross-backend view.
- `metrics`: `/crcr/metrics`, the daily series per backend.
- `api_shapes`: the pages' figures as flat JSON for the API.
- `charts`: the Plotly figures (pure: no models).
"""

from hud.pages.api_shapes import (
    backend_stats,
    flat_figures,
    summary_json,
)
from hud.pages.backend import (
    GATE_CHART_METRICS,
    GATE_HISTORY_DAYS,
    AdjustedPassRate,
    BackendPage,
    adjusted_pass_rate,
    backend_page,
    backend_summary,
    gate_history,
)
from hud.pages.commit import (
    commit_page,
    cross_backend_rows,
)
from hud.pages.common import (
    DEFAULT_DAYS,
    EMBED_FAILING,
    EMBED_PENDING,
    MAX_DAYS,
    METRICS_DEFAULT_DAYS,
    NIGHTLY_EVENTS,
    PR_EVENTS,
    STALE_GAP_FACTOR,
    STALE_MIN_SECONDS,
    STATE_EVALUATION_DAYS,
    BackendState,
    Window,
    backend_states,
    badge_dict,
    cell_status,
    is_stale,
)
from hud.pages.matrices import (
    COMPACT_AUTO_COLUMNS,
    GROUP_SEPARATORS,
    MATRIX_CONCLUSIONS,
    MATRIX_PAGE_SIZE,
    MAX_PINS,
    Matrix,
    MatrixCell,
    MatrixFilters,
    MatrixRow,
    column_group,
    compact_wanted,
    matrix,
)
from hud.pages.metrics import (
    METRICS_TABS,
    MetricsPage,
    daily_records,
    daily_rows,
    metrics_page,
)
from hud.pages.overview import (
    PROBE_RECENT,
    RATE_GOOD,
    RATE_WARN,
    RELAY_BADGES,
    SUMMARY_TABS,
    NightlyRow,
    RelayHealth,
    Summary,
    SummaryRow,
    nightly_rows,
    relay_health,
    summary,
    summary_rows,
)
from hud.pages.pr import (
    GATE_BADGES,
    GATE_GROUPS,
    SYNC_BADGES,
    gate_groups,
    pr_page,
    pr_summary,
)
from hud.pages.results import (
    ANSWER_ORDER,
    BackendResults,
    Expected,
    ReportedJob,
    ResultsPage,
    answer_lines,
    expected_state,
    results_page,
)

__all__ = [
    "ANSWER_ORDER",
    "COMPACT_AUTO_COLUMNS",
    "DEFAULT_DAYS",
    "EMBED_FAILING",
    "EMBED_PENDING",
    "GATE_BADGES",
    "GATE_CHART_METRICS",
    "GATE_GROUPS",
    "GATE_HISTORY_DAYS",
    "GROUP_SEPARATORS",
    "MATRIX_CONCLUSIONS",
    "MATRIX_PAGE_SIZE",
    "MAX_DAYS",
    "MAX_PINS",
    "METRICS_DEFAULT_DAYS",
    "METRICS_TABS",
    "NIGHTLY_EVENTS",
    "PROBE_RECENT",
    "PR_EVENTS",
    "RATE_GOOD",
    "RATE_WARN",
    "RELAY_BADGES",
    "STALE_GAP_FACTOR",
    "STALE_MIN_SECONDS",
    "STATE_EVALUATION_DAYS",
    "SUMMARY_TABS",
    "SYNC_BADGES",
    "AdjustedPassRate",
    "BackendPage",
    "BackendResults",
    "BackendState",
    "Expected",
    "Matrix",
    "MatrixCell",
    "MatrixFilters",
    "MatrixRow",
    "MetricsPage",
    "NightlyRow",
    "RelayHealth",
    "ReportedJob",
    "ResultsPage",
    "Summary",
    "SummaryRow",
    "Window",
    "adjusted_pass_rate",
    "answer_lines",
    "backend_page",
    "backend_states",
    "backend_stats",
    "backend_summary",
    "badge_dict",
    "cell_status",
    "column_group",
    "commit_page",
    "compact_wanted",
    "cross_backend_rows",
    "daily_records",
    "daily_rows",
    "expected_state",
    "flat_figures",
    "gate_groups",
    "gate_history",
    "is_stale",
    "matrix",
    "metrics_page",
    "nightly_rows",
    "pr_page",
    "pr_summary",
    "relay_health",
    "results_page",
    "summary",
    "summary_json",
    "summary_rows",
]
