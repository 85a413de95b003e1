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
    "margin": {"l": 55, "r": 20, "t": 70, "b": 40},
    "height": 300,
    "hovermode": "x unified",
    "legend": {"orientation": "h", "y": -0.2},
    "font": {"family": "system-ui, sans-serif", "size": 12},
    "template": "plotly_white",
}


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
    """The shaded 95% interval of a daily rate: up along `high`, back along `low`."""
    return go.Scatter(
        x=days + days[::-1],
        y=_percent(rows["high"]) + _percent(rows["low"])[::-1],
        fill="toself",
        fillcolor=BAND_FILL,
        line={"width": 0},
        hoverinfo="skip",
        name="95% interval",
        **extra,
    )


def pass_rate_figure(daily: pd.DataFrame) -> go.Figure:
    """Daily job pass rate (latest attempt) with its 95% Wilson band; hollow when n < min."""
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
    return _layout(figure, "Volume per day", barmode="stack")


def duration_figure(daily: pd.DataFrame) -> go.Figure:
    """Mean and median execution and end-to-end minutes per day."""
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


def backends_pass_rate_figure(daily: pd.DataFrame) -> go.Figure:
    """Daily pass rate, one line per backend (a band too when only one backend is shown)."""
    figure = go.Figure()
    backends = list(dict.fromkeys(daily["downstream"])) if not daily.empty else []
    for index, name in enumerate(backends):
        rows = daily[daily["downstream"] == name]
        days = _days(rows)
        if len(backends) == 1:
            figure.add_trace(_band(days, rows))
        figure.add_trace(
            go.Scatter(
                x=days,
                y=_percent(rows["pass_rate"]),
                mode="lines+markers",
                name=name,
                line={"color": OKABE_ITO[index % len(OKABE_ITO)]},
                marker={"symbol": index % 20},
                customdata=rows["n"].tolist(),
                hovertemplate="%{y:.1f}% of %{customdata}",
            )
        )
    return _layout(
        figure, "Job pass rate per day (%)", yaxis={"range": [0, 100.5], "ticksuffix": "%"}
    )


def backends_count_figure(daily: pd.DataFrame, column: str) -> go.Figure:
    """A daily count (`failures` or `runs`) per backend as grouped bars."""
    figure = go.Figure()
    backends = list(dict.fromkeys(daily["downstream"])) if not daily.empty else []
    for index, name in enumerate(backends):
        rows = daily[daily["downstream"] == name]
        figure.add_trace(
            go.Bar(
                x=_days(rows),
                y=rows[column].tolist(),
                name=name,
                marker_color=OKABE_ITO[index % len(OKABE_ITO)],
            )
        )
    titles = {
        "failures": "Failed, timed out or cancelled per day",
        "runs": "Attempts that ran per day",
    }
    return _layout(figure, titles.get(column, column), barmode="group")
