"""DataFrames → plotly.js figures for the HUD pages. Pure: no ORM, no settings, no plotly.

Figures are plain plotly.js JSON (`data` + `layout` dicts), built directly: no figure objects,
no per-request validation or deep copies (issue 14). The templates embed them with
`chart_json` (hud_format); `static/hud/charts.js` draws them with the plotly.js served from
static (no CDN), giving each the `plotly_white` template (`static/hud/plotly-white.js`), laying
out small multiples (`_panels`) and closing interval bands (`BAND`). Colours are Okabe–Ito, so
they stay distinct for colour-blind readers; every trace also has a name in the legend.
tests/pages/test_charts.py checks what charts.js draws of each figure against plotly's own
validator.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

Figure = dict[str, Any]
# A daily table (`stats.DAILY_COLUMNS`, with `downstream` where there are panels): a frame, or
# its columns by name as `metrics.daily_rows` reads them (no frame of 50 backends' days).
Daily = pd.DataFrame | Mapping[str, Sequence[Any]]

OKABE_ITO = (
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#009E73",  # bluish green
    "#E69F00",  # orange
    "#CC79A7",  # reddish purple
    "#56B4E9",  # sky blue
    "#F0E442",  # yellow
    "#000000",  # black
)
SUCCESS_COLOUR = OKABE_ITO[0]
FAILURE_COLOUR = OKABE_ITO[1]
BAND_FILL = "rgba(0, 114, 178, 0.18)"
BASE_LAYOUT: dict[str, Any] = {
    # Room below the x axis for the date ticks' second line (the year) and the legend.
    "margin": {"l": 55, "r": 40, "t": 60, "b": 60},
    "height": 300,
    "hovermode": "x unified",
    "legend": {"orientation": "h", "y": -0.25},
    "font": {"family": "system-ui, sans-serif", "size": 12},
    # A vertical toolbar on the right edge stays clear of the title on the left.
    "modebar": {"orientation": "v"},
}
NO_DATA = "No results in this window"
PANEL_HEIGHT = 150
# Below this many units a count axis ticks every 1 (plotly's own choice would tick by 0.5).
SMALL_COUNT = 6


# Value types JSON takes as they are; with floats, a list needs only its NaN/inf made null.
_PLAIN = frozenset({str, int, bool, type(None)})
_NUMBERS = _PLAIN | {float}
_SUMMABLE = frozenset({int, bool, float, type(None)})
_NOT_NONE = functools.partial(operator.is_not, None)


def _clean(value: Any) -> Any:
    if value is None or isinstance(value, (str, int)):  # most of a figure (bool is an int)
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _clean(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        # A trace's x/y/customdata lists: one look at their types instead of a call per value.
        kinds = set(map(type, value))
        if kinds <= _PLAIN:
            return list(value)
        # NaN and infinities carry into a sum: a finite one clears the whole list at C speed.
        if kinds <= _SUMMABLE and math.isfinite(sum(filter(_NOT_NONE, value))):
            return list(value)
        if kinds <= _NUMBERS:
            return [v if type(v) is not float or math.isfinite(v) else None for v in value]
        return [_clean(item) for item in value]
    if hasattr(value, "item"):  # a numpy scalar
        return _clean(value.item())
    return value


def figure_json(figure: Figure) -> dict[str, Any]:
    """A figure as plain JSON data (NaN → null, numpy → Python), ready for `chart_json`."""
    return _clean(figure)


def _figure(data: list[dict[str, Any]] | None = None, **layout: Any) -> Figure:
    return {"data": data or [], "layout": layout}


def _layout(figure: Figure, title: str, **extra: Any) -> Figure:
    figure["layout"].update({**BASE_LAYOUT, "title": {"text": title, "x": 0}, **extra})
    return figure


def _trace(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


def _add(figure: Figure, trace: dict[str, Any]) -> None:
    figure["data"].append(trace)


def _panels(
    figure: Figure,
    titles: list[str],
    x: list[str],
    traces: list[dict[str, Any]],
    values: list[list[dict[str, Any]]],
    yaxes: list[dict[str, Any]],
    spacing: float,
) -> Figure:
    """Small multiples: one titled, full-width panel per entry of `titles`, sharing the x
    axis (the rows of one column that `make_subplots` lays out). They travel as one panel's
    `traces` (their style) and, per panel, its traces' `values` (merged into the styles) and
    its y axis; `static/hud/charts.js` lays them out, so a page of 50 panels carries each
    style once, not 50 times. A trace's `x` is `x` unless its values give their own."""
    figure["panels"] = {
        "titles": titles,
        "spacing": spacing,
        "x": x,
        "traces": traces,
        "values": values,
        "yaxes": yaxes,
    }
    return figure


def _own_x(days: list[str], shared: list[str]) -> dict[str, Any]:
    """A panel trace's `x`, where its days are not the panels' shared ones."""
    return {} if days == shared else {"x": days}


def _days(daily: Daily) -> list[str]:
    # A page's days repeat for every backend: each is written once.
    names: dict[Any, str] = {}
    return [names.get(day) or names.setdefault(day, str(day)) for day in daily["day"]]


def _percent(series: Sequence[Any]) -> list[float | None]:
    """Shares as percentages to two decimals, NaN and None as None: rounded as arrays (a
    `round` per value was most of a 50-panel chart's cost)."""
    values = np.asarray(series, dtype=float)
    out = np.round(values * 100, 2).astype(object)
    out[np.isnan(values)] = None
    return out.tolist()


def _band_bounds(rows: Daily) -> tuple[list[float | None], list[float | None]]:
    """A daily rate's 95% interval in %, None on days without a value (a 0–100 % "interval"
    of nothing is not shown)."""
    unknown = np.isnan(np.asarray(rows["value" if "value" in rows else "pass_rate"], dtype=float))
    high, low = (np.asarray(rows[bound], dtype=float) for bound in ("high", "low"))
    return _percent(np.where(unknown, np.nan, high)), _percent(np.where(unknown, np.nan, low))


# The shaded 95% interval of a daily rate. charts.js draws a trace marked `band` as one closed
# shape, up along its `high` values and back along its `low` ones (plotly's `fill: toself`).
BAND = {
    "type": "scatter",
    "band": True,
    "mode": "lines",
    "fill": "toself",
    "fillcolor": BAND_FILL,
    "line": {"width": 0},
    "hoverinfo": "skip",
    "name": "95% interval",
}


def has_data(daily: Daily) -> bool:
    """Whether a daily table holds any counted job or any run (else the chart says so)."""
    return bool((np.asarray(daily["n"]) > 0).any() or (np.asarray(daily["runs"]) > 0).any())


def _no_data(title: str) -> Figure:
    """An honest empty chart: the title and a note, no axes, no band, no traces."""
    note = {"text": NO_DATA, "showarrow": False, "x": 0.5, "y": 0.5, "xref": "paper"}
    figure = _figure(annotations=[{**note, "yref": "paper"}])
    return _layout(figure, title, height=140, xaxis={"visible": False}, yaxis={"visible": False})


def count_axis(maximum: float) -> dict[str, Any]:
    """A y axis for counts: from zero, whole-number ticks only."""
    axis: dict[str, Any] = {"rangemode": "tozero", "tickformat": ",d"}
    if maximum < SMALL_COUNT:
        axis["dtick"] = 1
    return axis


def pass_rate_figure(daily: pd.DataFrame) -> Figure:
    """Daily job pass rate (latest attempt) with its 95% Wilson band; hollow when n < min."""
    if not has_data(daily):
        return _no_data("Job pass rate per day (%)")
    days = _days(daily)
    figure = _figure()
    high, low = _band_bounds(daily)
    _add(figure, {**BAND, "x": days, "high": high, "low": low})
    sufficient = daily["sufficient"].astype(bool).tolist()
    _add(
        figure,
        _trace(
            "scatter",
            x=days,
            y=_percent(daily["pass_rate"]),
            mode="lines+markers",
            line={"color": SUCCESS_COLOUR},
            marker={
                "symbol": ["circle" if ok else "circle-open" for ok in sufficient],
                "size": 8,
            },
            customdata=daily["n"].tolist(),
            hovertemplate="%{y:.1f}% of %{customdata} jobs<extra>pass rate</extra>",
            name="pass rate (hollow: n < 10)",
        ),
    )
    return _layout(
        figure, "Job pass rate per day (%)", yaxis={"range": [0, 100.5], "ticksuffix": "%"}
    )


def volume_figure(daily: pd.DataFrame) -> Figure:
    """Logical jobs per day by outcome (stacked) and attempts per day (line)."""
    if not has_data(daily):
        return _no_data("Volume per day")
    days = _days(daily)
    figure = _figure()
    _add(
        figure,
        _trace(
            "bar",
            x=days,
            y=daily["successes"].tolist(),
            name="✓ successes",
            marker={"color": SUCCESS_COLOUR},
        ),
    )
    _add(
        figure,
        _trace(
            "bar",
            x=days,
            y=daily["failures"].tolist(),
            name="✗ failed, timed out or cancelled",
            marker={"color": FAILURE_COLOUR, "pattern": {"shape": "/"}},
        ),
    )
    _add(
        figure,
        _trace(
            "scatter",
            x=days,
            y=daily["runs"].tolist(),
            name="attempts that ran",
            mode="lines+markers",
            line={"color": OKABE_ITO[7], "dash": "dot"},
        ),
    )
    tallest = max((daily["successes"] + daily["failures"]).max(), daily["runs"].max())
    return _layout(figure, "Volume per day", barmode="stack", yaxis=count_axis(tallest))


def duration_figure(daily: pd.DataFrame) -> Figure:
    """Mean and median execution and end-to-end minutes per day."""
    if not has_data(daily):
        return _no_data("Durations per day (minutes)")
    days = _days(daily)
    figure = _figure()
    series = (
        ("mean_execution_seconds", "run time, mean", OKABE_ITO[0], "solid"),
        ("p50_execution_seconds", "run time, P50", OKABE_ITO[0], "dot"),
        ("mean_end_to_end_seconds", "queue + run, mean", OKABE_ITO[3], "solid"),
        ("p50_end_to_end_seconds", "queue + run, P50", OKABE_ITO[3], "dot"),
    )
    for column, name, colour, dash in series:
        minutes = [None if pd.isna(v) else round(float(v) / 60, 1) for v in daily[column]]
        _add(
            figure,
            _trace(
                "scatter",
                x=days,
                y=minutes,
                name=name,
                mode="lines+markers",
                line={"color": colour, "dash": dash},
                hovertemplate="%{y} min",
            ),
        )
    return _layout(figure, "Durations per day (minutes)", yaxis={"rangemode": "tozero"})


def gate_history_figure(history: pd.DataFrame) -> Figure:
    """One panel per gated rate: its value as of each day, 95% band and the threshold."""
    names = list(dict.fromkeys(history["metric"]))
    traces = [
        {**BAND, "legendgroup": "band"},
        _trace(
            "scatter",
            mode="lines+markers",
            line={"color": SUCCESS_COLOUR},
            name="value",
            legendgroup="value",
            hovertemplate="%{y:.2f}% (n = %{customdata})",
        ),
        _trace(
            "scatter",
            mode="lines",
            line={"color": FAILURE_COLOUR, "dash": "dash"},
            name="threshold",
            legendgroup="threshold",
        ),
    ]
    values, shared = [], []
    for index, name in enumerate(names):
        rows = history[history["metric"] == name]
        days = [str(t.date()) if hasattr(t, "date") else str(t) for t in rows["as_of"]]
        shared = shared or days
        high, low = _band_bounds(rows)
        threshold = float(rows["threshold"].iloc[0]) * 100
        legend = {"showlegend": index == 0}
        values.append(
            [
                {**_own_x(days, shared), "high": high, "low": low, **legend},
                {
                    **_own_x(days, shared),
                    "y": _percent(rows["value"]),
                    "customdata": rows["n"].tolist(),
                    **legend,
                },
                {
                    "x": [days[0], days[-1]],
                    "y": [threshold, threshold],
                    "hovertemplate": f"threshold {rows['direction'].iloc[0]} {threshold:g}%",
                    **legend,
                },
            ]
        )
    figure = _layout(
        _figure(),
        "Gated rates as of each day (policy window, 95% interval)",
        height=max(260, 190 * len(names)),
    )
    yaxes = [{"ticksuffix": "%"}] * len(names)
    return _panels(figure, names, shared, traces, values, yaxes, 0.08)


def _by_backend(daily: Daily) -> Iterator[tuple[str, Callable[[list], list]]]:
    """(backend, what cuts its values out of a whole column's list), backends in the order of
    their first row: each column is converted once for every backend, then cut into panels
    (a sub-frame per backend and its columns cost more than the panels' values). A backend
    whose rows are together, as the rollups read them, is one slice."""
    rows: dict[str, list[int]] = {}
    for index, name in enumerate(daily["downstream"]):
        rows.setdefault(name, []).append(index)
    for name, positions in rows.items():
        if positions[-1] - positions[0] + 1 == len(positions):

            def cut(values: list, start=positions[0], stop=positions[-1] + 1) -> list:
                return values[start:stop]

        else:

            def cut(values: list, positions=positions) -> list:
                return [values[i] for i in positions]

        yield name, cut


def _backend_panels(
    daily: Daily,
    title: str,
    traces: list[dict[str, Any]],
    panel: Callable[[str, Callable[[list], list]], tuple[list[dict[str, Any]], dict[str, Any]]],
) -> Figure:
    """One full-width panel per backend, sharing the day axis: `panel(backend, cut)` gives a
    panel's trace values (without `x`) and its y axis."""
    days = _days(daily)
    backends, values, yaxes, shared = [], [], [], []
    for name, cut in _by_backend(daily):
        own, axis = panel(name, cut)
        panel_days = cut(days)
        shared = shared or panel_days
        backends.append(name)
        values.append([{**_own_x(panel_days, shared), **trace} for trace in own])
        yaxes.append(axis)
    figure = _layout(_figure(), title, height=90 + PANEL_HEIGHT * len(backends), showlegend=False)
    return _panels(figure, backends, shared, traces, values, yaxes, min(0.08, 0.5 / len(backends)))


def backends_pass_rate_figure(daily: Daily) -> Figure:
    """Daily pass rate, one panel per backend with its 95% band."""
    title = "Job pass rate per day (%)"
    if not has_data(daily):
        return _no_data(title)
    rates, counts = _percent(daily["pass_rate"]), np.asarray(daily["n"]).tolist()
    high, low = _band_bounds(daily)
    sufficient = np.asarray(daily["sufficient"], dtype=bool).tolist()
    symbols = ["circle" if ok else "circle-open" for ok in sufficient]
    traces = [
        BAND,
        _trace(
            "scatter",
            mode="lines+markers",
            line={"color": SUCCESS_COLOUR},
            marker={"size": 6},
        ),
    ]
    axis = {"range": [0, 100.5], "ticksuffix": "%", "dtick": 50}

    def panel(name: str, cut: Callable[[list], list]):
        rate = {
            "y": cut(rates),
            "name": name,
            "marker": {"symbol": cut(symbols)},
            "customdata": cut(counts),
            "hovertemplate": "%{y:.1f}% of %{customdata}<extra>" + name + "</extra>",
        }
        return [{"high": cut(high), "low": cut(low)}, rate], axis

    return _backend_panels(daily, title, traces, panel)


def backends_count_figure(daily: Daily, column: str) -> Figure:
    """A daily count (`failures` or `runs`) per backend, one panel per backend."""
    titles = {
        "failures": "Failed, timed out or cancelled per day",
        "runs": "Attempts that ran per day",
    }
    title = titles.get(column, column)
    if not has_data(daily):
        return _no_data(title)
    colour = FAILURE_COLOUR if column == "failures" else SUCCESS_COLOUR
    counts = np.asarray(daily[column]).tolist()
    traces = [_trace("bar", marker={"color": colour})]

    def panel(name: str, cut: Callable[[list], list]):
        values = cut(counts)
        bars = {"y": values, "name": name, "hovertemplate": "%{y}<extra>" + name + "</extra>"}
        return [bars], count_axis(float(max(values)))

    return _backend_panels(daily, title, traces, panel)
