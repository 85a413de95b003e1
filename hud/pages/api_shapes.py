"""Page figures as flat JSON for the API (`/api/v1/backends/`): exactly what the pages show."""

from __future__ import annotations

import datetime as dt
from typing import Any

from hud.models import Downstream
from hud.pages.backend import backend_summary
from hud.pages.common import Window
from hud.pages.overview import SummaryRow
from hud.stats import Estimate, OutcomeCounts


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
    return {
        "window_days": days,
        "window_start": window.start.isoformat(),
        "window_end": window.end.isoformat(),
        **summary_json(backend_summary(backend, window, now)),
    }
