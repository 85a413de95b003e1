"""`/crcr/<org>/<repo>`, a backend's page: stat cards, the gate, charts, matrices, failed tests.

The gate history chart is drawn from the stored daily evaluations (`gate_history`), and the
gate-adjusted pass rate is laid out beside the raw one (`adjusted_pass_rate`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pandas as pd

from hud import attribution, gates, promotion, stats
from hud.models import Downstream, LevelOverride
from hud.pages import charts
from hud.pages.common import (
    NIGHTLY_EVENTS,
    PR_EVENTS,
    BackendState,
    Window,
    backend_states,
    badge_dict,
)
from hud.pages.matrices import Matrix, MatrixFilters, compact_wanted, matrix
from hud.pages.metrics import daily_rows
from hud.reads import gate_counts, selectors
from hud.reads import matrix as reads_matrix
from hud.reads.window import stuck_counts

if TYPE_CHECKING:
    from hud.promotion import User


GATE_HISTORY_DAYS = 28
# Rates the gate decides on, charted over time (the policy's own windows apply).
GATE_CHART_METRICS = ("job_pass_rate", "timeout_rate", "overrun_rate", "flake_rate")


@dataclass
class BackendPage:
    """Everything `/crcr/<org>/<repo>` shows."""

    backend: Downstream
    level: int
    override: LevelOverride | None
    window: Window
    summary: dict[str, Any]
    gate: Any
    gate_behind: bool  # results arrived after `gate`; it is being evaluated again
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


def backend_summary(backend: Downstream, window: Window, now: dt.datetime) -> dict[str, Any]:
    """What `hud.stats.backend_summary` gives over the page window (ending `now`), the figures
    the stat cards show, aggregated in SQL over the derived layer: the gate's own counts
    (`gate_counts.backend_counts`, proven equal to `hud.stats` over every attempt), and the
    stuck attempts as `/crcr` counts them."""
    (counts,) = gate_counts.backend_counts(
        [backend.id], [window.days], window.days, now, flips=True
    ).values()
    summary: dict[str, Any] = {
        name: counts.metric(name, window.start, stats.DEFAULT_MIN_N)
        for name in stats.METRIC_NAMES
        if name != "days_of_data"
    }
    last = counts.last_result
    summary |= {
        "days_of_data": counts.days_of_data(window.start),
        "counts": counts.outcome_counts(window.start),
        "stuck_jobs": stuck_counts([backend.id], window.start, window.end, now).get(backend.id, 0),
        "last_result_at": last,
        "seconds_since_last_result": None if last is None else (now - last).total_seconds(),
    }
    return summary


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
    backend = selectors.backend(full_name)
    if backend is None:
        return None
    window = Window.ending(now, days)
    override = selectors.active_overrides([backend.id], now).get(backend.id)
    view = promotion.current_gate(backend, now)
    gate = view.gate
    daily = pd.DataFrame(daily_rows([backend], days, now))
    history = gate_history(
        selectors.gate_evaluations(backend.id, (now - dt.timedelta(days=GATE_HISTORY_DAYS)).date())
    )
    # The matrices read one page of rows each from the derived layer (hud.reads.matrix).
    pr_matrix = matrix(backend.id, PR_EVENTS, filters, window, now, page, pins=pins)
    nightly_matrix = matrix(
        backend.id, NIGHTLY_EVENTS, replace(filters, pr=None), window, now, nightly_page,
        pins=pins,
    )  # fmt: skip
    return BackendPage(
        backend=backend,
        level=override.level if override else backend.level,
        override=override,
        window=window,
        summary=backend_summary(backend, window, now),
        gate=gate,
        gate_behind=view.behind,
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
        job_names=reads_matrix.job_names(backend.id, window.start, window.end),
        filters=filters,
        adjusted=adjusted_pass_rate(gate.adjusted),
        can_request=user is not None and promotion.maintains(user, backend),
        state=backend_states([backend.id], now)[backend.id],
        compact=compact_wanted(compact, pr_matrix, nightly_matrix),
        pins=pins,
    )
