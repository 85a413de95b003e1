"""What each HUD page shows: rows from `hud.reads.selectors`, every number from `hud.stats`.

The views parse the query string, call one function here and render. Nothing here computes a
figure a second way: pass rates, counts, timings and stuck jobs are `hud.stats` results on the
frame `selectors.jobs_frame` loads for the page's window, so the summary and the backend page
agree by construction (pytorch/test-infra #8833). The small additions that `hud.stats` has no
notion of (staleness, matrix layout, expected-but-silent backends) are defined here once.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from django.conf import settings

from hud import attribution, levels, stats
from hud.checks import mirror
from hud.models import Dispatch, Downstream, FailedTest, Job, Level, LevelOverride
from hud.pages import charts
from hud.reads import rollups, selectors
from hud.stats import Estimate, OutcomeCounts

if TYPE_CHECKING:
    from hud.models import DemotionWarning, GateEvaluation, PromotionRequest
    from hud.promotion import User

DEFAULT_DAYS = 7
MAX_DAYS = 90
METRICS_DEFAULT_DAYS = 30
MATRIX_PAGE_SIZE = 25
GATE_HISTORY_DAYS = 28
# Rates the gate decides on, charted over time (the policy's own windows apply).
GATE_CHART_METRICS = ("job_pass_rate", "timeout_rate", "overrun_rate", "flake_rate")
PR_EVENTS = ("pull_request", "push")
NIGHTLY_EVENTS = ("nightly", "periodic")
METRICS_TABS = {
    "pr": ("pull_request",),
    "trunk": ("push",),
    "nightly": NIGHTLY_EVENTS,
}
# A backend is stale when its last result is older than this many of its usual gaps.
# Pass-rate colour bands of `/crcr` (as upstream's HUD), used when the gate raises no alarm.
RATE_GOOD = 0.95
RATE_WARN = 0.8
STALE_GAP_FACTOR = 2.0
STALE_MIN_SECONDS = 3600.0
MIN_RESULTS_FOR_GAP = 5
MATRIX_CONCLUSIONS = (
    "success",
    "failure",
    "cancelled",
    "timed_out",
    "skipped",
    "neutral",
    "in_progress",
    "stuck",
)


@dataclass(frozen=True)
class Window:
    """A page's half-open time window [start, end) of `days` days ending now."""

    days: int
    start: dt.datetime
    end: dt.datetime

    @classmethod
    def ending(cls, now: dt.datetime, days: int) -> Window:
        """The window of `days` days ending at `now`."""
        return cls(days, now - dt.timedelta(days=days), now)

    @property
    def calendar_days(self) -> int:
        """UTC dates the window touches: `days` + 1 unless it starts at midnight."""
        last = (self.end - dt.timedelta(microseconds=1)).date()
        return (last - self.start.date()).days + 1


@dataclass(frozen=True)
class BackendState:
    """What needs a decision about a backend now: a warning, a pending request, the gate."""

    warning: DemotionWarning | None = None
    overdue: bool = False
    pending: PromotionRequest | None = None
    evaluation: GateEvaluation | None = None

    @property
    def demoting(self) -> bool:
        """The latest daily evaluation found a demotion rule holding."""
        return self.evaluation is not None and self.evaluation.retention == "demote"

    @property
    def at_risk(self) -> bool:
        """An open demotion warning or a demoting gate: shown and sorted as bad."""
        return self.warning is not None or self.demoting


# Daily evaluations older than this are not news (the evaluation runs every day).
STATE_EVALUATION_DAYS = 2


def backend_states(downstream_ids: list[int], now: dt.datetime) -> dict[int, BackendState]:
    """Each backend's state for `/crcr` and its page, in three queries for any count."""
    warnings = selectors.open_warnings(downstream_ids)
    pending = selectors.pending_requests(downstream_ids)
    since = (now - dt.timedelta(days=STATE_EVALUATION_DAYS)).date()
    evaluations = selectors.latest_evaluations(downstream_ids, since)
    return {
        backend_id: BackendState(
            warning=warnings.get(backend_id),
            overdue=backend_id in warnings and warnings[backend_id].deadline < now.date(),
            pending=pending.get(backend_id),
            evaluation=evaluations.get(backend_id),
        )
        for backend_id in downstream_ids
    }


def cell_status(status: str, conclusion: str, stuck: bool) -> str:
    """The display status of one attempt: its conclusion, in_progress or stuck."""
    if status != "completed":
        return "stuck" if stuck else "in_progress"
    return conclusion or "neutral"


def usual_gap_seconds(times: pd.Series) -> float | None:
    """90th percentile of the gaps between consecutive results; None with too few results."""
    ordered = times.dropna().sort_values()
    if len(ordered) < MIN_RESULTS_FOR_GAP:
        return None
    gaps = ordered.diff().dropna().dt.total_seconds()
    return float(np.quantile(gaps.to_numpy(), 0.9))


def is_stale(last_result_at: dt.datetime | None, usual_gap: float | None, window: Window) -> bool:
    """No result for longer than twice the usual gap (or none in the window at all)."""
    if last_result_at is None:
        return True
    silence = (window.end - last_result_at).total_seconds()
    if usual_gap is None:
        return last_result_at < window.start
    return silence > max(STALE_GAP_FACTOR * usual_gap, STALE_MIN_SECONDS)


# --------------------------------------------------------------------------- summary


@dataclass
class SummaryRow:
    """One backend on `/crcr`: level, pass rate with interval, counts, timings, staleness."""

    backend: Downstream
    level: int
    override: LevelOverride | None
    pass_rate: Estimate
    counts: OutcomeCounts
    execution_mean: Estimate
    execution_p50: Estimate
    stuck: int
    last_result_at: dt.datetime | None
    usual_gap: float | None
    stale: bool
    on_hud: bool = True
    state: BackendState = field(default_factory=BackendState)

    @property
    def sort_key(self) -> tuple:
        """Worst first: at risk of demotion, then lowest pass rate; no data after data."""
        value = self.pass_rate.value
        return (
            not self.state.at_risk,
            value is None,
            value if value is not None else 0.0,
            self.backend.full_name,
        )

    @property
    def rate_class(self) -> str:
        """The pass rate's colour: the gate's verdict first, then the rate's band."""
        value = self.pass_rate.value
        if self.state.at_risk:
            return "rate-bad"
        if value is None:
            return "rate-none"
        if value >= RATE_GOOD:
            return "rate-good"
        return "rate-warn" if value >= RATE_WARN else "rate-bad"


def window_figures(frame: stats.Jobs, window: Window, now: dt.datetime) -> dict[str, Any]:
    """The figures `/crcr` shows for one backend's frame (each the `hud.stats` function)."""
    prepared = stats.prepare(frame)
    counts = stats.outcome_counts(prepared, window.start, window.end)
    completed = prepared.rows.loc[prepared.rows["status"] == "completed", "placed_at"]
    return {
        "pass_rate": stats.pass_rate(prepared, window.start, window.end),
        "counts": counts,
        "execution_mean": stats.compute_metric(
            "execution_seconds_mean", prepared, window.start, window.end
        ),
        "execution_p50": stats.compute_metric(
            "execution_seconds_p50", prepared, window.start, window.end
        ),
        "stuck": len(stats.stuck_jobs(prepared, now)),
        "last_result_at": stats.last_result_at(prepared),
        "usual_gap": usual_gap_seconds(completed),
    }


def _split_by_backend(prepared: stats.PreparedJobs) -> dict[str, stats.PreparedJobs]:
    """One preparation for every backend, split by backend.

    Every `hud.stats` step is partitioned by downstream (the logical job key starts with it and
    supersession compares rows of the same downstream), so a backend's slice of the prepared
    whole equals `stats.prepare` of its own rows, at a fraction of the cost of 50 preparations.
    """
    pieces = [
        {name: part for name, part in table.groupby("downstream", sort=False)}
        for table in (prepared.rows, prepared.attempts, prepared.latest, prepared.first)
    ]
    empty = [table.iloc[0:0] for table in (prepared.rows, prepared.attempts, prepared.latest,
                                           prepared.first)]  # fmt: skip
    return {
        name: stats.PreparedJobs(
            *(piece.get(name, blank) for piece, blank in zip(pieces, empty, strict=True))
        )
        for name in pieces[0]
    }


def summary_rows(backends: list[Downstream], window: Window, now: dt.datetime) -> list[SummaryRow]:
    """Summary rows of `backends` over `window`: one frame query and one override query."""
    on_hud = [b.id for b in backends if b.level >= Level.L2]
    frame = selectors.jobs_frame(window.start, window.end, on_hud) if on_hud else None
    overrides = selectors.active_overrides([b.id for b in backends], now)
    states = backend_states([b.id for b in backends], now)
    parts = _split_by_backend(stats.prepare(frame)) if frame is not None else {}
    rows = []
    for backend in backends:
        part = parts.get(backend.full_name) or stats.prepare(stats.empty_jobs_frame())
        figures = window_figures(part, window, now)
        last = figures["last_result_at"] or getattr(backend, "last_result_at", None)
        override = overrides.get(backend.id)
        rows.append(
            SummaryRow(
                backend=backend,
                level=override.level if override else backend.level,
                override=override,
                pass_rate=figures["pass_rate"],
                counts=figures["counts"],
                execution_mean=figures["execution_mean"],
                execution_p50=figures["execution_p50"],
                stuck=figures["stuck"],
                last_result_at=last,
                usual_gap=figures["usual_gap"],
                stale=backend.level >= Level.L2
                and is_stale(figures["last_result_at"], figures["usual_gap"], window),
                on_hud=backend.level >= Level.L2,
                state=states[backend.id],
            )
        )
    return rows


# The tabs of `/crcr`: (key, heading).
SUMMARY_TABS = (("backends", "Backends"), ("nightly", "Nightly"))
# Results of the relay probe shown on its card (attempts, newest first).
PROBE_RECENT = 10


@dataclass
class NightlyRow:
    """A backend's newest nightly/periodic SHA and the latest attempt of each of its jobs."""

    backend: Downstream
    head_sha: str = ""
    event_type: str = ""
    placed_at: dt.datetime | None = None
    statuses: list[tuple[str, str, str]] = field(default_factory=list)  # workflow, job, status
    result: str = ""  # failure | in_progress | success | "" (no nightly): the worst job wins

    @property
    def counts(self) -> dict[str, int]:
        """Jobs of the run by display status."""
        counts: dict[str, int] = {}
        for _, _, status in self.statuses:
            counts[status] = counts.get(status, 0) + 1
        return counts


def nightly_rows(backends: list[Downstream], now: dt.datetime) -> list[NightlyRow]:
    """Each L2+ backend's newest nightly run (two queries), worst result first."""
    on_hud = [b for b in backends if b.level >= Level.L2]
    runs = selectors.latest_nightly_runs([b.id for b in on_hud])
    rows = []
    for backend in on_hud:
        jobs = runs.get(backend.id)
        if not jobs:
            rows.append(NightlyRow(backend))
            continue
        latest = _latest_with_status(stats.prepare(_frame_of(jobs)), now)
        statuses = sorted(
            zip(latest["workflow_name"], latest["job_name"], latest["display"], strict=True),
            key=lambda item: _col((item[0], item[1])),
        )
        failing = sum(status in EMBED_FAILING for _, _, status in statuses)
        pending = sum(status in EMBED_PENDING for _, _, status in statuses)
        rows.append(
            NightlyRow(
                backend,
                head_sha=jobs[-1].head_sha,
                event_type=jobs[-1].event_type,
                placed_at=max(job.placed_at for job in jobs),
                statuses=statuses,
                result=_embed_state(failing, pending),
            )
        )
    order = {"failure": 0, "in_progress": 1, "success": 2, "": 3}
    return sorted(rows, key=lambda r: (order[r.result], -r.backend.level, r.backend.full_name))


@dataclass
class RelayHealth:
    """The relay probe's card on `/crcr`: its latest results and how fresh they are.

    `state`: unlisted (not in the allowlist), not_stored (L1), silent (no result yet),
    stale (silent for longer than usual), failing (its newest result did not succeed), healthy.
    """

    repo: str
    state: str
    row: SummaryRow | None = None
    recent: list[tuple[Job, str]] = field(default_factory=list)  # (attempt, display status)

    @property
    def badge(self) -> dict[str, str]:
        """The state as a badge: css status class, symbol, word, meaning."""
        return _badge(RELAY_BADGES, self.state)


RELAY_BADGES = {
    "healthy": ("success", "✓", "healthy", "the probe's newest result succeeded, on time"),
    "failing": ("failure", "✗", "failing", "the probe's newest result did not succeed"),
    "stale": ("stuck", "⚠", "stale", "no probe result for over twice its usual gap"),
    "silent": ("none", "–", "no reports", "the probe has not reported to this HUD yet"),
    "not_stored": ("none", "–", "not stored", "the probe is at L1: its results are not kept"),
    "unlisted": ("none", "–", "not listed", "the probe repository is not in the allowlist"),
}


def relay_health(rows: list[SummaryRow], window: Window, now: dt.datetime) -> RelayHealth:
    """The probe backend's card, from its summary row and its newest attempts (one query)."""
    repo = settings.CRCR_PROBE_REPO
    row = next((r for r in rows if r.backend.full_name.lower() == repo.lower()), None)
    if row is None:
        probe = selectors.backend(repo)
        if probe is None or probe.delisted:
            return RelayHealth(repo, "unlisted")
        row = summary_rows([probe], window, now)[0]
    if not row.on_hud:
        return RelayHealth(row.backend.full_name, "not_stored", row)
    recent = list(
        selectors.jobs(selectors.JobFilters(downstream=row.backend.full_name))[:PROBE_RECENT]
    )
    if not recent:
        return RelayHealth(row.backend.full_name, "silent", row)
    statuses = [
        cell_status(
            job.status,
            job.conclusion,
            job.status != "completed"
            and (job.in_progress_received_at or job.placed_at) < now - stats.DEFAULT_STUCK_AFTER,
        )
        for job in recent
    ]
    newest_done = next((s for s in statuses if s not in EMBED_PENDING), None)
    if row.stale or row.last_result_at is None:
        state = "stale"
    elif newest_done is not None and newest_done != "success":
        state = "failing"
    else:
        state = "healthy"
    return RelayHealth(row.backend.full_name, state, row, list(zip(recent, statuses, strict=True)))


@dataclass
class Summary:
    """`/crcr`: backends grouped by effective level, highest first, worst first within."""

    window: Window
    groups: list[tuple[str, list[SummaryRow]]]
    tab: str = "backends"
    relay: RelayHealth | None = None
    nightly: list[NightlyRow] = field(default_factory=list)

    @property
    def rows(self) -> list[SummaryRow]:
        """Every row, in display order."""
        return [row for _, rows in self.groups for row in rows]


def summary(days: int, now: dt.datetime, tab: str = "backends") -> Summary:
    """Everything `/crcr?days=N[&tab=nightly]` shows: the tab's table and the relay card."""
    window = Window.ending(now, days)
    backends = list(selectors.backends())
    if tab == "nightly":
        return Summary(window, [], tab, relay_health([], window, now), nightly_rows(backends, now))
    rows = summary_rows(backends, window, now)
    groups = []
    for level in sorted(Level, reverse=True):
        members = sorted((r for r in rows if r.level == level), key=lambda r: r.sort_key)
        if members:
            groups.append((level.label, members))
    return Summary(window, groups, tab, relay_health(rows, window, now))


# --------------------------------------------------------------------------- matrices


@dataclass
class MatrixCell:
    """The latest attempt of one logical job: its row, display status and attempt count."""

    job: Job
    status: str
    attempts: int


@dataclass
class MatrixRow:
    """One upstream PR head SHA or commit, with a cell per job column."""

    event_type: str
    pr_number: int
    head_sha: str
    placed_at: dt.datetime
    title: str = ""
    author: str = ""
    cells: list[MatrixCell | None] = field(default_factory=list)


@dataclass
class Matrix:
    """Rows (newest first) × job columns, one page of rows."""

    columns: list[tuple[str, str]]
    rows: list[MatrixRow]
    page: int
    pages: int
    total_rows: int
    pinned: int = 0  # the first `pinned` columns are the reader's pinned jobs

    @property
    def groups(self) -> list[dict[str, Any]]:
        """Runs of adjacent columns that share a group (`column_group`), for a header row."""
        groups: list[dict[str, Any]] = []
        for index, (_, job) in enumerate(self.columns):
            name = "pinned" if index < self.pinned else column_group(job)
            if groups and groups[-1]["name"] == name:
                groups[-1]["span"] += 1
            else:
                groups.append({"name": name, "span": 1})
        return groups


# The compact matrix is the default from this many job columns (`?compact=0|1` decides).
COMPACT_AUTO_COLUMNS = 10
# At most this many pinned jobs (`?pin=<job>`, repeatable).
MAX_PINS = 10
GROUP_SEPARATORS = ("-", "_", "/", ":", " ")


def column_group(job_name: str) -> str:
    """A job's group in the compact matrix: its name up to the first separator
    (`test-ops` and `test-nn` → `test`; `build` alone → `build`)."""
    cut = min((job_name.find(c) for c in GROUP_SEPARATORS if c in job_name), default=-1)
    return job_name[:cut] if cut > 0 else job_name


def compact_wanted(requested: bool | None, *matrices: Matrix) -> bool:
    """The compact mode: as the reader asked, else on when a matrix has many job columns."""
    if requested is not None:
        return requested
    return any(len(m.columns) >= COMPACT_AUTO_COLUMNS for m in matrices)


@dataclass(frozen=True)
class MatrixFilters:
    """Filters of the backend page's matrices (all optional)."""

    event_type: str | None = None
    job_name: str | None = None
    conclusion: str | None = None
    pr: int | None = None


def _latest_with_status(prepared: stats.PreparedJobs, now: dt.datetime) -> pd.DataFrame:
    latest = prepared.latest
    stuck_ids = set(stats.stuck_jobs(prepared, now)["id"].tolist())
    statuses = [
        cell_status(status, conclusion, job_id in stuck_ids)
        for status, conclusion, job_id in zip(
            latest["status"], latest["conclusion"], latest["id"], strict=True
        )
    ]
    return latest.assign(display=pd.Series(statuses, index=latest.index, dtype=object))


def matrix(
    latest: pd.DataFrame,
    events: Iterable[str],
    filters: MatrixFilters,
    window: Window,
    page: int,
    page_size: int = MATRIX_PAGE_SIZE,
    pins: tuple[str, ...] = (),
) -> Matrix:
    """Lay latest attempts of `events` in the window out as rows × job columns, one page.

    Columns of pinned job names come first (in pin order), then builds, then by name.
    """
    cells = latest[
        latest["event_type"].isin(list(events))
        & (latest["placed_at"] >= pd.Timestamp(window.start))
        & (latest["placed_at"] < pd.Timestamp(window.end))
    ]
    if filters.event_type:
        cells = cells[cells["event_type"] == filters.event_type]
    if filters.job_name:
        cells = cells[cells["job_name"] == filters.job_name]
    if filters.pr is not None:
        cells = cells[cells["pr_number"] == filters.pr]
    if filters.conclusion:
        cells = cells[cells["display"] == filters.conclusion]
    row_key = ["event_type", "pr_number", "head_sha"]
    if cells.empty:
        return Matrix([], [], 1, 1, 0)
    heads = (
        cells.groupby(row_key, sort=False)["placed_at"]
        .max()
        .reset_index()
        .sort_values(["placed_at", "head_sha"], ascending=[False, True], kind="mergesort")
    )
    total = len(heads)
    pages = max(1, math.ceil(total / page_size))
    page = min(max(page, 1), pages)
    heads = heads.iloc[(page - 1) * page_size : page * page_size]
    shown = cells.merge(heads[row_key], on=row_key)
    columns = sorted(set(zip(shown["workflow_name"], shown["job_name"], strict=True)), key=_col)
    pinned = sorted((c for c in columns if c[1] in pins), key=lambda c: (pins.index(c[1]), c))
    columns = pinned + [c for c in columns if c not in pinned]
    jobs = selectors.latest_attempt_rows(shown["id"].astype(int).tolist())
    details = selectors.pr_details(heads["pr_number"].astype(int).tolist())
    by_row: dict[tuple, dict[tuple[str, str], MatrixCell]] = {}
    for record in shown.itertuples(index=False):
        key = (record.event_type, int(record.pr_number), record.head_sha)
        cell = MatrixCell(jobs[int(record.id)], record.display, int(record.attempts))
        by_row.setdefault(key, {})[(record.workflow_name, record.job_name)] = cell
    rows = []
    for head in heads.itertuples(index=False):
        key = (head.event_type, int(head.pr_number), head.head_sha)
        row_cells = by_row.get(key, {})
        rows.append(
            MatrixRow(
                event_type=head.event_type,
                pr_number=int(head.pr_number),
                head_sha=head.head_sha,
                placed_at=head.placed_at.to_pydatetime(),
                title=details.get(int(head.pr_number), {}).get("title", ""),
                author=details.get(int(head.pr_number), {}).get("author", ""),
                cells=[row_cells.get(column) for column in columns],
            )
        )
    return Matrix(columns, rows, page, pages, total, len(pinned))


def _col(column: tuple[str, str]) -> tuple[bool, str, str]:
    # Builds first, then alphabetical: the order a maintainer reads a workflow in.
    workflow, job = column
    return (not job.startswith("build"), job, workflow)


# --------------------------------------------------------------------------- backend page


@dataclass
class BackendPage:
    """Everything `/crcr/<org>/<repo>` shows."""

    backend: Downstream
    level: int
    override: LevelOverride | None
    window: Window
    summary: dict[str, Any]
    gate: Any
    gate_figure: dict | None
    pr_matrix: Matrix
    nightly_matrix: Matrix
    failed_tests: list[selectors.FailedTestRank]
    figures: dict[str, dict]
    job_names: list[str]
    filters: MatrixFilters
    adjusted: AdjustedPassRate | None = None
    can_request: bool = False
    state: BackendState = field(default_factory=BackendState)
    compact: bool = False
    pins: tuple[str, ...] = ()

    @property
    def gate_figures(self) -> dict[str, Any]:
        """The gate's value of each metric a headline card also shows, by metric name.

        The promotion criterion wins over the demotion rule of the same metric (the same
        number over the same window, but the promotion one is the decision being asked).
        """
        evaluation = self.gate.evaluation
        figures = {c.metric: c for c in evaluation.demotion_criteria}
        figures.update({c.metric: c for c in evaluation.criteria})
        return figures


@dataclass
class AdjustedPassRate:
    """The gate-adjusted pass rate beside the raw one, per gated window, and what it left out."""

    basis: str  # raw | adjusted: which one the gate decides on (policy pass_rate_basis)
    windows: list[dict[str, Any]]  # {"days", "raw": Estimate, "adjusted": Estimate}
    excluded: list[dict[str, Any]]  # attribution's excluded jobs, each with its verdict badge

    @property
    def left_out(self) -> list[dict[str, Any]]:
        """The verdicts the adjusted rate leaves out, with their badges (for the legend)."""
        return [{"verdict": v, "badge": badge_dict(v)} for v in attribution.GATE_EXCLUDED]


def adjusted_pass_rate(adjusted: dict[str, Any] | None) -> AdjustedPassRate | None:
    """`BackendGate.adjusted` (hud.attribution.gate_adjusted_pass_rates) laid out for the page."""
    from hud import gates

    if not adjusted:
        return None
    windows = []
    for days in adjusted["windows"]:
        pair = adjusted["estimates"].get(gates.metric_key("job_pass_rate", days))
        if pair is not None:
            windows.append({"days": days, "raw": pair["raw"], "adjusted": pair["adjusted"]})
    excluded = [
        {**item, "badge": badge_dict(item["verdict"])}
        for item in sorted(adjusted["excluded"], key=lambda e: e["placed_at"] or "", reverse=True)
    ]
    return AdjustedPassRate(adjusted.get("basis", "raw"), windows, excluded)


def backend_summary(frame: stats.Jobs, window: Window, now: dt.datetime) -> dict[str, Any]:
    """`hud.stats.backend_summary` over the page window, the figures the stat cards show."""
    return stats.backend_summary(frame, window.start, window.end, now)


def gate_history(evaluations: Iterable[tuple[dt.date, dict[str, Any]]]) -> pd.DataFrame:
    """Each gated rate as the stored daily evaluations decided on it, one point per day.

    Drawn from what `promotion.daily_evaluation` stored, so every point is that day's gate:
    its exclusions, its pass-rate basis and its as-of cut-off, never a second rule.
    """
    records = [
        {
            "as_of": pd.Timestamp(detail["as_of"]),
            "metric": item["name"],
            **{key: item[key] for key in ("value", "low", "high", "n", "threshold")},
            "direction": item["direction"],
            "window_days": item["window_days"],
        }
        for _, detail in evaluations
        for item in detail.get("criteria", [])
        if item["metric"] in GATE_CHART_METRICS
    ]
    return pd.DataFrame.from_records(
        records,
        columns=[
            "as_of", "metric", "value", "low", "high", "n", "threshold", "direction",
            "window_days",
        ],
    )  # fmt: skip


def backend_page(
    full_name: str,
    *,
    days: int,
    now: dt.datetime,
    filters: MatrixFilters,
    page: int = 1,
    nightly_page: int = 1,
    user: User | None = None,
    compact: bool | None = None,
    pins: tuple[str, ...] = (),
) -> BackendPage | None:
    """Everything `/crcr/<org>/<repo>` shows; None for an unknown backend.

    `user` (the signed-in reader) decides whether the page offers "Request a level change";
    `compact` (None: automatic) and `pins` lay out the matrices.
    """
    from hud import promotion  # the promotion service owns the gate evaluation

    backend = selectors.backend(full_name)
    if backend is None:
        return None
    window = Window.ending(now, days)
    override = selectors.active_overrides([backend.id], now).get(backend.id)
    gate = promotion.evaluate_backend(backend, now)
    # The rows `jobs_frame(window.start, window.end)` selects, so `/crcr` shows the same.
    frame = stats.prepare(selectors.jobs_frame(window.start, now, [backend.id]))
    latest = _latest_with_status(frame, now)
    events_pr = PR_EVENTS if filters.event_type in (None, *PR_EVENTS) else ()
    events_nightly = NIGHTLY_EVENTS if filters.event_type in (None, *NIGHTLY_EVENTS) else ()
    daily = stats.daily_series(frame, window.start, window.end)
    history = gate_history(
        selectors.gate_evaluations(backend.id, (now - dt.timedelta(days=GATE_HISTORY_DAYS)).date())
    )
    pr_matrix = matrix(latest, events_pr, filters, window, page, pins=pins)
    nightly_matrix = matrix(
        latest, events_nightly, replace(filters, pr=None), window, nightly_page, pins=pins
    )
    return BackendPage(
        backend=backend,
        level=override.level if override else backend.level,
        override=override,
        window=window,
        summary=backend_summary(frame, window, now),
        gate=gate,
        gate_figure=charts.figure_json(charts.gate_history_figure(history))
        if not history.empty
        else None,
        pr_matrix=pr_matrix,
        nightly_matrix=nightly_matrix,
        failed_tests=selectors.failed_tests_ranked(
            backend.id,
            window.start,
            window.end,
            event_type=filters.event_type,
            job_name=filters.job_name,
        ),
        figures={
            "pass_rate": charts.figure_json(charts.pass_rate_figure(daily)),
            "volume": charts.figure_json(charts.volume_figure(daily)),
            "durations": charts.figure_json(charts.duration_figure(daily)),
        },
        job_names=sorted(set(latest["job_name"].tolist())),
        filters=filters,
        adjusted=adjusted_pass_rate(gate.adjusted),
        can_request=user is not None and promotion.maintains(user, backend),
        state=backend_states([backend.id], now)[backend.id],
        compact=compact_wanted(compact, pr_matrix, nightly_matrix),
        pins=pins,
    )


# --------------------------------------------------------------------------- PR and commit


@dataclass
class ReportedJob:
    """The latest attempt of one logical job on a PR or commit page."""

    job: Job
    status: str
    attempts: int
    failed_tests: list[FailedTest]
    earlier: list[Job]
    verdict: dict[str, Any] | None = None

    @property
    def advisory(self) -> dict[str, Any] | None:
        """The backend's self-reported triage verdict (advisory, never ours)."""
        if self.verdict is not None and self.verdict.get("advisory"):
            return self.verdict["advisory"]
        triage = self.job.triage_verdict
        return triage if isinstance(triage, dict) and triage else None


@dataclass
class Expected:
    """A backend dispatched for a head SHA that has not reported for it."""

    backend: Downstream
    head_sha: str
    dispatch: Dispatch
    state: str  # expected | pending | no_response | dispatch_failed | not_on_hud

    @property
    def label(self) -> str:
        """The state in words."""
        return {
            "expected": "expected (dispatch not sent yet)",
            "pending": "pending (dispatched, no callback yet)",
            "no_response": "no response",
            "dispatch_failed": "dispatch failed",
            "not_on_hud": "L1: results are not stored",
        }[self.state]


@dataclass
class BackendResults:
    """One backend's section on a PR or commit page."""

    backend: Downstream
    jobs: list[ReportedJob]
    expected: list[Expected]
    level_then: int | None = None  # effective level when the page's newest head SHA ran
    level_now: int | None = None  # effective level today (an override wins)

    @property
    def level_changed(self) -> bool:
        """Whether the backend's level changed since the time the page shows."""
        return self.level_then != self.level_now

    @property
    def failing(self) -> bool:
        """Whether any of its latest attempts got a verdict (did not succeed)."""
        return any(r.verdict and r.verdict.get("verdict") for r in self.jobs)


@dataclass
class ResultsPage:
    """`/crcr/pr/<n>` or `/crcr/commit/<sha>`: every backend's jobs and silent dispatches."""

    sections: list[BackendResults]
    head_shas: list[tuple[str, dt.datetime | None]]
    title: str = ""
    author: str = ""
    levels_as_of: dt.datetime | None = None  # the moment the sections' level_then describe
    no_response_after: int = 0
    verdict_summary: list[dict[str, Any]] = field(default_factory=list)
    judged: int = 0
    gate: dict[str, Any] | None = None
    gate_groups: list[dict[str, Any]] = field(default_factory=list)
    check_runs: list[dict[str, Any]] = field(default_factory=list)
    cross_backend: list[dict[str, Any]] = field(default_factory=list)
    mirroring: bool = True  # whether this server sends check runs at all
    answers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passing_backends(self) -> list[Downstream]:
        """Backends with results and no failing latest job (shown collapsed)."""
        return [s.backend for s in self.sections if s.jobs and not s.failing]

    @property
    def any_mirrored(self) -> bool:
        """Whether any check run was (or is being) sent: else its table starts collapsed."""
        return any(run["sync"] != "not_mirrored" for run in self.check_runs)

    @property
    def job_count(self) -> int:
        """Logical jobs shown."""
        return sum(len(section.jobs) for section in self.sections)

    def add_verdicts(self, verdicts: list[dict[str, Any]]) -> None:
        """Our verdict count summary (every verdict, with its badge, in rule order)."""
        counts = attribution.verdict_counts(verdicts)
        self.judged = sum(counts.values())
        self.verdict_summary = [
            {"verdict": name, "count": counts[name], "badge": badge_dict(name)}
            for name in attribution.VERDICTS
        ]


def _frame_of(jobs: list[Job]) -> pd.DataFrame:
    return stats.jobs_frame(
        {
            "id": job.id,
            "downstream": job.downstream.full_name,
            **{name: getattr(job, name) for name in selectors.FRAME_COLUMNS[2:]},
        }
        for job in jobs
    )


def expected_state(dispatch: Dispatch, now: dt.datetime) -> str:
    """What a dispatch without results means now (CRCR_NO_RESPONSE_AFTER_SECONDS)."""
    if dispatch.level_at_dispatch < Level.L2:
        return "not_on_hud"
    if dispatch.outcome in (Dispatch.Outcome.FAILED, Dispatch.Outcome.NOT_INSTALLED):
        return "dispatch_failed"
    if dispatch.outcome == Dispatch.Outcome.PENDING or dispatch.dispatched_at is None:
        return "expected"
    waited = (now - dispatch.dispatched_at).total_seconds()
    return "no_response" if waited > settings.CRCR_NO_RESPONSE_AFTER_SECONDS else "pending"


def badge_dict(verdict: str) -> dict[str, str]:
    """A verdict's badge as the verdict dicts carry it: css, symbol, word, meaning."""
    return _badge(attribution.BADGES, verdict)


# The order a reviewer reads failing jobs in: what may be theirs first.
ANSWER_ORDER = (
    attribution.UPSTREAM_LIKELY,
    attribution.NEW_FAILURE,
    attribution.BROKEN_DOWNSTREAM,
    attribution.FLAKY,
    attribution.INFRA,
)


def answer_lines(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per failing job of a PR: the newest head SHA's run of each backend job, if it
    failed, with its verdict in words, its strongest evidence and links to its tests."""
    newest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for item in verdicts:
        key = (item["downstream"], item["workflow_name"], item["job_name"])
        if key not in newest or item["placed_at"] > newest[key]["placed_at"]:
            newest[key] = item
    lines = [
        {
            **item,
            "tests": [
                {"id": test, "url": f"/crcr/{item['downstream']}/tests/{test}"}
                for test in item["failed_tests"][:10]
            ],
        }
        for item in newest.values()
        if item["verdict"]
    ]
    return sorted(
        lines,
        key=lambda line: (
            ANSWER_ORDER.index(line["verdict"]),
            line["downstream"],
            line["workflow_name"],
            line["job_name"],
        ),
    )


def results_page(
    jobs: list[Job],
    dispatches: list[Dispatch],
    now: dt.datetime,
    title: str = "",
    verdicts: dict[int, dict[str, Any]] | None = None,
) -> ResultsPage | None:
    """Group a PR's or commit's attempts by backend (latest per logical job); None if empty.

    `verdicts` maps attempt ids to their logical job's verdict (`attribution.index_by_job`).
    """
    verdicts = verdicts or {}
    if not jobs and not dispatches:
        return None
    by_id = {job.id: job for job in jobs}
    sections: dict[int, BackendResults] = {}
    reported: set[tuple[int, str]] = set()
    if jobs:
        prepared = stats.prepare(_frame_of(jobs))
        latest = _latest_with_status(prepared, now).sort_values(
            ["placed_at", "job_name"], ascending=[False, True], kind="mergesort"
        )
        attempts = prepared.attempts
        earlier: dict[tuple, list[Job]] = {}
        for record in attempts.itertuples(index=False):
            if record.attempt_index < record.attempts - 1:
                key = tuple(getattr(record, c) for c in stats.LOGICAL_JOB_KEY)
                earlier.setdefault(key, []).append(by_id[int(record.id)])
        for record in latest.itertuples(index=False):
            job = by_id[int(record.id)]
            key = tuple(getattr(record, c) for c in stats.LOGICAL_JOB_KEY)
            section = sections.setdefault(job.downstream_id, BackendResults(job.downstream, [], []))
            section.jobs.append(
                ReportedJob(
                    job=job,
                    status=record.display,
                    attempts=int(record.attempts),
                    failed_tests=list(job.failed_tests.all()),
                    earlier=earlier.get(key, []),
                    verdict=verdicts.get(job.id),
                )
            )
            reported.add((job.downstream_id, job.head_sha))
    for dispatch in dispatches:
        sha = dispatch.delivery.head_sha
        if (dispatch.downstream_id, sha) in reported:
            continue
        section = sections.setdefault(
            dispatch.downstream_id, BackendResults(dispatch.downstream, [], [])
        )
        if any(e.head_sha == sha for e in section.expected):
            continue
        section.expected.append(
            Expected(dispatch.downstream, sha, dispatch, expected_state(dispatch, now))
        )
    # Failing backends first (a reviewer reads those), then by level and name.
    ordered = sorted(
        sections.values(),
        key=lambda s: (not s.failing, -s.backend.level, s.backend.full_name.lower()),
    )
    shas: dict[str, dt.datetime | None] = {}
    for job in sorted(jobs, key=lambda j: j.placed_at, reverse=True):
        shas.setdefault(job.head_sha, job.placed_at)
    for dispatch in dispatches:
        shas.setdefault(dispatch.delivery.head_sha, dispatch.delivery.received_at)
    head_shas = sorted(
        shas.items(),
        key=lambda item: item[1] or dt.datetime.min.replace(tzinfo=dt.UTC),
        reverse=True,
    )
    as_of = head_shas[0][1] if head_shas and head_shas[0][1] else now
    _levels_then(ordered, as_of, now)
    return ResultsPage(
        ordered,
        head_shas,
        title,
        levels_as_of=as_of,
        no_response_after=settings.CRCR_NO_RESPONSE_AFTER_SECONDS,
    )


def _levels_then(sections: list[BackendResults], as_of: dt.datetime, now: dt.datetime) -> None:
    """Set each section's effective level at `as_of` (level history, an override then wins)
    and today's, so a PR page shows the level its results were judged under (three queries)."""
    ids = [section.backend.id for section in sections]
    then = levels.levels_at(ids, as_of)
    overrides = selectors.active_overrides(ids, now)
    for section in sections:
        override = overrides.get(section.backend.id)
        section.level_now = override.level if override else section.backend.level
        # No history up to that moment (a backend created without an import): today's level
        # is the best knowledge, and no change is claimed.
        section.level_then = then.get(section.backend.id, section.level_now)


# The gate's job lists, in the order a reviewer reads them: (key, heading).
GATE_GROUPS = (
    ("blocking", "Blocking"),
    ("pending", "Waiting for"),
    ("non_blocking", "Not blocking"),
)
# The `crcr/gate` state as a badge: (css status class, symbol, word, meaning).
GATE_BADGES = {
    "failure": ("failure", "✗", "blocking", "an L4 job failed on its latest attempt"),
    "pending": ("in_progress", "◔", "pending", "waiting for L4 jobs (until the settle time)"),
    "success": ("success", "✓", "not blocking", "no L4 failure and nothing left to wait for"),
}
# How far a check run got on GitHub (`hud.checks.mirror._sync_info`).
SYNC_BADGES = {
    "sent": ("success", "✓", "sent", "GitHub shows the latest state"),
    "pending": ("in_progress", "◔", "pending", "not on GitHub yet; the reconciler re-sends it"),
    "failed": ("failure", "✗", "failed", "GitHub refused it after every retry"),
    "not_mirrored": ("none", "–", "not mirrored", "no check run is wanted for this job"),
}


def _badge(table: dict[str, tuple[str, str, str, str]], key: str) -> dict[str, str]:
    css, symbol, word, meaning = table.get(key, ("none", "·", key or "unknown", ""))
    return {"css": css, "symbol": symbol, "word": word, "meaning": meaning}


def _sync_why(run: dict[str, Any], mirroring: bool) -> str:
    """Why a check run is not on GitHub ("not mirrored because …"), or its last error."""
    if run["sync"] != "not_mirrored":
        return run.get("last_error") or ""
    reason = run.get("reason") or ""
    if not mirroring and reason in ("", "not mirrored yet"):
        return "not mirrored: this server sends no check runs (no GitHub App configured)"
    if not reason or reason.startswith("not mirrored"):
        return reason or "not mirrored"
    return f"not mirrored because {reason}"


def gate_groups(gate: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The gate's blocking, pending and non-blocking lists with their headings (empty skipped)."""
    if gate is None:
        return []
    return [
        {"key": key, "heading": heading, "items": gate[key]}
        for key, heading in GATE_GROUPS
        if gate.get(key)
    ]


def pr_page(number: int, now: dt.datetime) -> ResultsPage | None:
    """Everything `/crcr/pr/<n>` shows; None when nothing is known about the PR.

    Our verdict per failing job (one bulk attribution read), the `crcr/gate` decision of the
    newest dispatched head SHA and each attempt's mirrored check run (`hud.checks.mirror`).
    """
    jobs = list(selectors.pr_jobs(number))
    verdicts = attribution.verdicts_for(jobs) if jobs else []
    page = results_page(
        jobs,
        selectors.dispatches_for(pr=number),
        now,
        selectors.pr_title(number),
        attribution.index_by_job(verdicts),
    )
    if page is None:
        return None
    page.author = selectors.pr_author(number)
    page.add_verdicts(verdicts)
    page.answers = answer_lines(verdicts)
    state = mirror.pr_mirror_state(number, now, latest_gate_only=True)
    page.gate = state["gate"]
    if page.gate is not None:
        page.gate["badge"] = _badge(GATE_BADGES, page.gate["state"])
        page.gate["check_run"]["badge"] = _badge(SYNC_BADGES, page.gate["check_run"]["sync"])
    page.gate_groups = gate_groups(page.gate)
    page.mirroring = mirror.mirror_enabled()
    page.check_runs = [
        {**run, "badge": _badge(SYNC_BADGES, run["sync"]), "why": _sync_why(run, page.mirroring)}
        for run in state["check_runs"]
    ]
    return page


EMBED_FAILING = ("failure", "timed_out", "stuck")
EMBED_PENDING = ("in_progress",)


def pr_summary(number: int, now: dt.datetime) -> dict[str, Any] | None:
    """The compact state of a PR's newest head SHA, per backend (embed, JSON and badge).

    Each logical job counts once, by its latest attempt; a job stuck in progress counts as
    failing. `state` is failure when any job fails, pending while any runs, else success.
    """
    jobs = list(selectors.jobs(selectors.JobFilters(pr=number)))
    if not jobs:
        return None
    head_sha = jobs[0].head_sha  # newest first: the newest head SHA reported
    latest: dict[tuple[str, str, str], Job] = {}
    for job in jobs:
        if job.head_sha != head_sha:
            continue
        key = (job.downstream.full_name, job.workflow_name, job.job_name)
        if key not in latest or job.run_attempt > latest[key].run_attempt:
            latest[key] = job
    # Levels as they were when the newest head SHA ran, not today's (an old PR keeps its level).
    ran_at = max(job.placed_at for job in latest.values())
    then = levels.levels_at(list({job.downstream_id for job in latest.values()}), ran_at)
    backends: dict[str, dict[str, Any]] = {}
    for (name, _, _), job in sorted(latest.items()):
        since = job.in_progress_received_at or job.placed_at
        stuck = job.status == "in_progress" and since < now - stats.DEFAULT_STUCK_AFTER
        status = cell_status(job.status, job.conclusion, stuck)
        entry = backends.setdefault(
            name,
            {"downstream": name, "level": f"L{then.get(job.downstream_id, job.downstream.level)}",
             "url": f"/crcr/{name}",
             "failing": 0, "pending": 0, "passing": 0, "jobs": 0},
        )  # fmt: skip
        entry["jobs"] += 1
        if status in EMBED_FAILING:
            entry["failing"] += 1
        elif status in EMBED_PENDING:
            entry["pending"] += 1
        elif status == "success":
            entry["passing"] += 1
    rows = list(backends.values())
    for entry in rows:
        entry["state"] = _embed_state(entry["failing"], entry["pending"])
    return {
        "pr_number": number,
        "head_sha": head_sha,
        "state": _embed_state(sum(e["failing"] for e in rows), sum(e["pending"] for e in rows)),
        "backends": rows,
        "url": f"/crcr/pr/{number}",
    }


def _embed_state(failing: int, pending: int) -> str:
    if failing:
        return "failure"
    return "in_progress" if pending else "success"


def cross_backend_rows(backends: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`commit_view` backends with each failing job paired with its bisect hint."""
    rows = []
    for entry in backends:
        hints = {hint["job"]: hint for hint in entry["bisect"]}
        failing = [
            {"verdict": item, "hint": hints.get(f"{item['workflow_name']}/{item['job_name']}")}
            for item in entry["jobs"]
            if item["verdict"]
        ]
        rows.append(
            {
                "downstream": entry["downstream"],
                "failing": failing,
                "jobs": len(entry["jobs"]),
            }
        )
    return rows


def commit_page(sha: str, now: dt.datetime) -> ResultsPage | None:
    """Everything `/crcr/commit/<sha>` shows; None when nothing is known about the commit.

    Our verdicts and the cross-backend view with each failing job's bisect hint come from one
    `attribution.commit_view` call.
    """
    jobs = list(selectors.commit_jobs(sha))
    view = attribution.commit_view(sha) if jobs else None
    verdicts = view["verdicts"] if view else []
    page = results_page(
        jobs, selectors.dispatches_for(sha=sha), now, verdicts=attribution.index_by_job(verdicts)
    )
    if page is not None:
        page.add_verdicts(verdicts)
        page.cross_backend = cross_backend_rows(view["backends"] if view else [])
        delivery = selectors.delivery_for_sha(sha)
        if delivery is not None and delivery.pr_number:
            page.title = f"PR #{delivery.pr_number}: {delivery.pr_title}".rstrip(": ")
            page.author = delivery.pr_author
        elif delivery is not None and delivery.ref:
            page.title = f"push to {delivery.ref}"
        else:
            numbers = {r.job.pr_number for s in page.sections for r in s.jobs if r.job.pr_number}
            if len(numbers) == 1:
                page.title = f"PR #{numbers.pop()}"
    return page


# --------------------------------------------------------------------------- metrics


def daily_rows(
    backends: list[Downstream], days: int, now: dt.datetime, events: Iterable[str] | None = None
) -> pd.DataFrame:
    """`hud.stats.daily_series` per backend over the last `days` UTC days, from the rollups."""
    window = Window.ending(now, days)
    start = (now - dt.timedelta(days=days - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
    series = rollups.daily_series([b.id for b in backends], start, window.end, events)
    parts = [series[b.id].assign(downstream=b.full_name) for b in backends]
    if not parts:
        return pd.DataFrame(columns=["downstream", *stats.DAILY_COLUMNS])
    return pd.concat(parts, ignore_index=True)[["downstream", *stats.DAILY_COLUMNS]]


def daily_records(daily: pd.DataFrame) -> list[dict[str, Any]]:
    """Daily rows as plain JSON-able dicts (NaN → None)."""
    out = []
    for record in daily.to_dict("records"):
        out.append(
            {
                key: (None if isinstance(value, float) and math.isnan(value) else value)
                for key, value in record.items()
            }
        )
    return out


@dataclass
class MetricsPage:
    """`/crcr/metrics`: daily pass rate, failures and runs per backend."""

    days: int
    tab: str
    selected: Downstream | None
    backends: list[Downstream]
    figures: dict[str, dict]
    rows: list[dict[str, Any]]


def metrics_page(
    days: int, tab: str, now: dt.datetime, selected: Downstream | None = None
) -> MetricsPage:
    """Everything `/crcr/metrics` shows."""
    on_hud = [b for b in selectors.backends() if b.level >= Level.L2]
    shown = [selected] if selected is not None else on_hud
    daily = daily_rows(shown, days, now, METRICS_TABS[tab])
    return MetricsPage(
        days=days,
        tab=tab,
        selected=selected,
        backends=on_hud,
        figures={
            "pass_rate": charts.figure_json(charts.backends_pass_rate_figure(daily)),
            "failures": charts.figure_json(charts.backends_count_figure(daily, "failures")),
            "runs": charts.figure_json(charts.backends_count_figure(daily, "runs")),
        },
        rows=daily_records(daily),
    )


# --------------------------------------------------------------------------- API shapes


def flat_figures(row: SummaryRow, window: Window) -> dict[str, Any]:
    """A summary row's figures as flat JSON/CSV columns (the `/api/v1/backends/` stats)."""
    return {
        "window_days": window.days,
        "effective_level": f"L{row.level}",
        "pass_rate": row.pass_rate.value,
        "pass_rate_low": row.pass_rate.low if row.pass_rate.value is not None else None,
        "pass_rate_high": row.pass_rate.high if row.pass_rate.value is not None else None,
        "pass_rate_n": row.pass_rate.n,
        "successes": row.counts.successes,
        "failures": row.counts.failures,
        "timed_out": row.counts.timed_out,
        "cancelled": row.counts.cancelled,
        "counted": row.counts.counted,
        "execution_seconds_mean": row.execution_mean.value,
        "execution_seconds_p50": row.execution_p50.value,
        "stuck_jobs": row.stuck,
        "stale": row.stale,
    }


def summary_json(summary: dict[str, Any]) -> dict[str, Any]:
    """`hud.stats.backend_summary` output as plain JSON (estimates with their intervals)."""
    out: dict[str, Any] = {}
    for key, value in summary.items():
        if isinstance(value, Estimate):
            out[key] = value.to_dict()
        elif isinstance(value, OutcomeCounts):
            out[key] = {**value.__dict__, "counted": value.counted}
        elif isinstance(value, dt.datetime):
            out[key] = value.isoformat()
        elif hasattr(value, "to_dict"):
            out[key] = value.to_dict()
        else:
            out[key] = value
    return out


def backend_stats(backend: Downstream, days: int, now: dt.datetime) -> dict[str, Any]:
    """A backend's window figures as JSON: exactly what its page's stat cards show."""
    window = Window.ending(now, days)
    frame = selectors.jobs_frame(window.start, window.end, [backend.id])
    return {
        "window_days": days,
        "window_start": window.start.isoformat(),
        "window_end": window.end.isoformat(),
        **summary_json(backend_summary(frame, window, now)),
    }
