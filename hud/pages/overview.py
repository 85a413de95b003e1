"""`/crcr`, the summary: every backend's row by level, the nightly tab and the relay probe's card.

Each row's figures are `hud.stats` results on one frame for all backends, split by backend
(`summary_rows`), so they equal what each backend's own page shows.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.conf import settings

from hud import stats
from hud.models import Downstream, Job, Level, LevelOverride
from hud.pages.common import (
    EMBED_FAILING,
    EMBED_PENDING,
    NIGHTLY_EVENTS,
    BackendState,
    Window,
    backend_states,
    badge,
    cell_status,
    embed_state,
    is_stale,
    logical_with_status,
)
from hud.pages.matrices import column_order
from hud.reads import logical, selectors
from hud.reads.window import empty_figures, window_figures
from hud.stats import Estimate, OutcomeCounts

# Pass-rate colour bands of `/crcr` (as upstream's HUD), used when the gate raises no alarm.
RATE_GOOD = 0.95
RATE_WARN = 0.8


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


def summary_rows(backends: list[Downstream], window: Window, now: dt.datetime) -> list[SummaryRow]:
    """Summary rows of `backends` over `window`, aggregated in SQL (`hud.reads.window`)."""
    on_hud = [b.id for b in backends if b.level >= Level.L2]
    computed = window_figures(on_hud, window.start, window.end, now)
    overrides = selectors.active_overrides([b.id for b in backends], now)
    states = backend_states([b.id for b in backends], now)
    rows = []
    for backend in backends:
        figures = computed.get(backend.id) or empty_figures()
        usual_gap = figures.usual_gap
        last = figures.last_result_at or getattr(backend, "last_result_at", None)
        override = overrides.get(backend.id)
        rows.append(
            SummaryRow(
                backend=backend,
                level=override.level if override else backend.level,
                override=override,
                pass_rate=figures.pass_rate,
                counts=figures.counts,
                execution_mean=figures.execution_mean,
                execution_p50=figures.execution_p50,
                stuck=figures.stuck,
                last_result_at=last,
                usual_gap=usual_gap,
                stale=backend.level >= Level.L2
                and is_stale(figures.last_result_at, usual_gap, window),
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
    runs = logical.newest_nightlies([b.id for b in on_hud], NIGHTLY_EVENTS)
    rows = []
    for backend in on_hud:
        run = runs.get(backend.id)
        if run is None:
            rows.append(NightlyRow(backend))
            continue
        latest = logical_with_status(run, now)
        statuses = sorted(
            zip(latest["workflow_name"], latest["job_name"], latest["display"], strict=True),
            key=lambda item: column_order((item[0], item[1])),
        )
        failing = sum(status in EMBED_FAILING for _, _, status in statuses)
        pending = sum(status in EMBED_PENDING for _, _, status in statuses)
        rows.append(
            NightlyRow(
                backend,
                head_sha=latest["head_sha"].iloc[0],
                event_type=latest.sort_values("placed_at")["event_type"].iloc[-1],
                placed_at=latest["placed_at"].max().to_pydatetime(),
                statuses=statuses,
                result=embed_state(failing, pending),
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
        return badge(RELAY_BADGES, self.state)


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
            stats.is_stuck(job.status, job.in_progress_received_at, job.placed_at, now),
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
