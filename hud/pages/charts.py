"""DataFrames → plotly figures for the HUD pages. Pure: no ORM, no settings.

Figures are returned as plain JSON-able dicts (`figure_json`) that the templates embed with
`json_script` and draw with the plotly.js served from static (no CDN). Colours are Okabe–Ito,
so they stay distinct for colour-blind readers; every trace also has a name in the legend.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

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
    "template": "plotly_white",
    # A vertical toolbar on the right edge stays clear of the title on the left.
    "modebar": {"orientation": "v"},
}
NO_DATA = "No results in this window"
PANEL_HEIGHT = 150
# Below this many units a count axis ticks every 1 (plotly's own choice would tick by 0.5).
SMALL_COUNT = 6


def figure_json(figure: go.Figure) -> dict[str, Any]:
    """A figure as plain JSON data (NaN → null), ready for `json_script`."""
    return json.loads(figure.to_json())


def _layout(figure: go.Figure, title: str, **extra: Any) -> go.Figure:
    figure.update_layout(**{**BASE_LAYOUT, "title": {"text": title, "x": 0}, **extra})
    return figure


def _days(daily: pd.DataFrame) -> list[str]:
    return [str(day) for day in daily["day"]]


def _percent(series: pd.Series) -> list[float | None]:
    return [None if pd.isna(value) else round(float(value) * 100, 2) for value in series]


def _band(days: list[str], rows: pd.DataFrame, **extra: Any) -> go.Scatter:
    """The shaded 95% interval of a daily rate: up along `high`, back along `low`.

    Days without a value have no interval (a 0–100 % "interval" of nothing is not shown).
    """
    known = rows["value" if "value" in rows else "pass_rate"].notna()
    high = _percent(rows["high"].where(known))
    low = _percent(rows["low"].where(known))
    return go.Scatter(
        x=days + days[::-1],
        y=high + low[::-1],
        mode="lines",
        fill="toself",
        fillcolor=BAND_FILL,
        line={"width": 0},
        hoverinfo="skip",
        name="95% interval",
        **extra,
    )


def has_data(daily: pd.DataFrame) -> bool:
    """Whether a daily frame holds any counted job or any run (else the chart says so)."""
    return not daily.empty and bool((daily["n"] > 0).any() or (daily["runs"] > 0).any())


def _no_data(title: str) -> go.Figure:
    """An honest empty chart: the title and a note, no axes, no band, no traces."""
    figure = go.Figure()
    figure.add_annotation(text=NO_DATA, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return _layout(figure, title, height=140, xaxis={"visible": False}, yaxis={"visible": False})


def count_axis(maximum: float) -> dict[str, Any]:
    """A y axis for counts: from zero, whole-number ticks only."""
    axis: dict[str, Any] = {"rangemode": "tozero", "tickformat": ",d"}
    if maximum < SMALL_COUNT:
        axis["dtick"] = 1
    return axis


def pass_rate_figure(daily: pd.DataFrame) -> go.Figure:
    """Daily job pass rate (latest attempt) with its 95% Wilson band; hollow when n < min."""
    if not has_data(daily):
        return _no_data("Job pass rate per day (%)")
    days = _days(daily)
    figure = go.Figure()
    figure.add_trace(_band(days, daily))
    sufficient = daily["sufficient"].astype(bool).tolist()
    figure.add_trace(
        go.Scatter(
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
        )
    )
    return _layout(
        figure, "Job pass rate per day (%)", yaxis={"range": [0, 100.5], "ticksuffix": "%"}
    )


def volume_figure(daily: pd.DataFrame) -> go.Figure:
    """Logical jobs per day by outcome (stacked) and attempts per day (line)."""
    if not has_data(daily):
        return _no_data("Volume per day")
    days = _days(daily)
    figure = go.Figure()
    figure.add_trace(
        go.Bar(
            x=days, y=daily["successes"].tolist(), name="✓ successes", marker_color=SUCCESS_COLOUR
        )
    )
    figure.add_trace(
        go.Bar(
            x=days,
            y=daily["failures"].tolist(),
            name="✗ failed, timed out or cancelled",
            marker_color=FAILURE_COLOUR,
            marker_pattern_shape="/",
        )
    )
    figure.add_trace(
        go.Scatter(
            x=days,
            y=daily["runs"].tolist(),
            name="attempts that ran",
            mode="lines+markers",
            line={"color": OKABE_ITO[7], "dash": "dot"},
        )
    )
    tallest = max((daily["successes"] + daily["failures"]).max(), daily["runs"].max())
    return _layout(figure, "Volume per day", barmode="stack", yaxis=count_axis(tallest))


def duration_figure(daily: pd.DataFrame) -> go.Figure:
    """Mean and median execution and end-to-end minutes per day."""
    if not has_data(daily):
        return _no_data("Durations per day (minutes)")
    days = _days(daily)
    figure = go.Figure()
    series = (
        ("mean_execution_seconds", "run time, mean", OKABE_ITO[0], "solid"),
        ("p50_execution_seconds", "run time, P50", OKABE_ITO[0], "dot"),
        ("mean_end_to_end_seconds", "queue + run, mean", OKABE_ITO[3], "solid"),
        ("p50_end_to_end_seconds", "queue + run, P50", OKABE_ITO[3], "dot"),
    )
    for column, name, colour, dash in series:
        minutes = [None if pd.isna(v) else round(float(v) / 60, 1) for v in daily[column]]
        figure.add_trace(
            go.Scatter(
                x=days,
                y=minutes,
                name=name,
                mode="lines+markers",
                line={"color": colour, "dash": dash},
                hovertemplate="%{y} min",
            )
        )
    return _layout(figure, "Durations per day (minutes)", yaxis={"rangemode": "tozero"})


def gate_history_figure(history: pd.DataFrame) -> go.Figure:
    """One panel per gated rate: its value as of each day, 95% band and the threshold."""
    names = list(dict.fromkeys(history["metric"]))
    figure = make_subplots(
        rows=len(names), cols=1, shared_xaxes=True, subplot_titles=names, vertical_spacing=0.08
    )
    for index, name in enumerate(names, start=1):
        rows = history[history["metric"] == name]
        days = [str(t.date()) if hasattr(t, "date") else str(t) for t in rows["as_of"]]
        figure.add_trace(
            _band(days, rows, showlegend=index == 1, legendgroup="band"),
            row=index,
            col=1,
        )
        figure.add_trace(
            go.Scatter(
                x=days,
                y=_percent(rows["value"]),
                mode="lines+markers",
                line={"color": SUCCESS_COLOUR},
                name="value",
                showlegend=index == 1,
                legendgroup="value",
                customdata=rows["n"].tolist(),
                hovertemplate="%{y:.2f}% (n = %{customdata})",
            ),
            row=index,
            col=1,
        )
        threshold = float(rows["threshold"].iloc[0]) * 100
        figure.add_trace(
            go.Scatter(
                x=[days[0], days[-1]],
                y=[threshold, threshold],
                mode="lines",
                line={"color": FAILURE_COLOUR, "dash": "dash"},
                name="threshold",
                showlegend=index == 1,
                legendgroup="threshold",
                hovertemplate=f"threshold {rows['direction'].iloc[0]} {threshold:g}%",
            ),
            row=index,
            col=1,
        )
        figure.update_yaxes(ticksuffix="%", row=index, col=1)
    return _layout(
        figure,
        "Gated rates as of each day (policy window, 95% interval)",
        height=max(260, 190 * len(names)),
    )


def _panels(backends: list[str], title: str) -> go.Figure:
    """One full-width panel per backend, sharing the day axis (small multiples)."""
    figure = make_subplots(
        rows=len(backends),
        cols=1,
        shared_xaxes=True,
        subplot_titles=backends,
        vertical_spacing=min(0.08, 0.5 / len(backends)),
    )
    return _layout(figure, title, height=90 + PANEL_HEIGHT * len(backends), showlegend=False)


def _backends(daily: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(daily["downstream"])) if not daily.empty else []


def backends_pass_rate_figure(daily: pd.DataFrame) -> go.Figure:
    """Daily pass rate, one panel per backend with its 95% band."""
    title = "Job pass rate per day (%)"
    if not has_data(daily):
        return _no_data(title)
    backends = _backends(daily)
    figure = _panels(backends, title)
    for index, name in enumerate(backends, start=1):
        rows = daily[daily["downstream"] == name]
        days = _days(rows)
        figure.add_trace(_band(days, rows), row=index, col=1)
        figure.add_trace(
            go.Scatter(
                x=days,
                y=_percent(rows["pass_rate"]),
                mode="lines+markers",
                name=name,
                line={"color": SUCCESS_COLOUR},
                marker={
                    "symbol": [
                        "circle" if ok else "circle-open" for ok in rows["sufficient"].astype(bool)
                    ],
                    "size": 6,
                },
                customdata=rows["n"].tolist(),
                hovertemplate="%{y:.1f}% of %{customdata}<extra>" + name + "</extra>",
            ),
            row=index,
            col=1,
        )
        figure.update_yaxes(range=[0, 100.5], ticksuffix="%", dtick=50, row=index, col=1)
    return figure


def backends_count_figure(daily: pd.DataFrame, column: str) -> go.Figure:
    """A daily count (`failures` or `runs`) per backend, one panel per backend."""
    titles = {
        "failures": "Failed, timed out or cancelled per day",
        "runs": "Attempts that ran per day",
    }
    title = titles.get(column, column)
    if not has_data(daily):
        return _no_data(title)
    backends = _backends(daily)
    figure = _panels(backends, title)
    colour = FAILURE_COLOUR if column == "failures" else SUCCESS_COLOUR
    for index, name in enumerate(backends, start=1):
        rows = daily[daily["downstream"] == name]
        figure.add_trace(
            go.Bar(
                x=_days(rows),
                y=rows[column].tolist(),
                name=name,
                marker_color=colour,
                hovertemplate="%{y}<extra>" + name + "</extra>",
            ),
            row=index,
            col=1,
        )
        figure.update_yaxes(**count_axis(float(rows[column].max())), row=index, col=1)
    return figure
