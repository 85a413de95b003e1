"""`/crcr/metrics`: the daily pass rate, failures and runs per backend, from the rollups."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hud import stats
from hud.models import Downstream
from hud.pages import charts
from hud.pages.common import NIGHTLY_EVENTS, Window
from hud.reads import rollups, selectors

METRICS_TABS = {
    "pr": ("pull_request",),
    "trunk": ("push",),
    "nightly": NIGHTLY_EVENTS,
}


def daily_rows(
    backends: Sequence[Downstream | selectors.HudBackend],
    days: int,
    now: dt.datetime,
    events: Iterable[str] | None = None,
) -> dict[str, np.ndarray | list]:
    """`hud.stats.daily_series` per backend over the last `days` UTC days, from the rollups, as
    columns: `downstream` (owner/repo), then `stats.DAILY_COLUMNS`."""
    window = Window.ending(now, days)
    start = (now - dt.timedelta(days=days - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
    if not backends:
        return {"downstream": [], **{column: [] for column in stats.DAILY_COLUMNS}}
    table = rollups.daily_table([b.id for b in backends], start, window.end, events)
    names = {b.id: b.full_name for b in backends}
    return {"downstream": [names[i] for i in table.pop("downstream_id").tolist()], **table}


def daily_records(daily: dict[str, np.ndarray | list]) -> list[dict[str, Any]]:
    """Daily rows (`daily_rows`' columns) as plain JSON-able dicts (NaN → None), built column
    by column: a frame's `to_dict("records")` boxes every value on its own."""
    columns = list(daily)
    values = [_plain(daily[column]) for column in columns]
    return [dict(zip(columns, row, strict=True)) for row in zip(*values, strict=True)]


def _plain(column: np.ndarray | list) -> list[Any]:
    """A column's values as Python ones, NaN as None."""
    if not isinstance(column, np.ndarray):
        return column
    values = column.tolist()
    if column.dtype.kind == "f":
        return [None if math.isnan(value) else value for value in values]
    return values


@dataclass
class MetricsPage:
    """`/crcr/metrics`: daily pass rate, failures and runs per backend."""

    days: int
    tab: str
    selected: Downstream | None
    backends: list[selectors.HudBackend]
    figures: dict[str, dict]
    rows: list[dict[str, Any]]


def metrics_page(
    days: int, tab: str, now: dt.datetime, selected: Downstream | None = None
) -> MetricsPage:
    """Everything `/crcr/metrics` shows."""
    on_hud = selectors.on_hud()
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
        # The table of numbers is shown for one backend; all of them are in the exports.
        rows=daily_records(daily) if selected is not None else [],
    )
