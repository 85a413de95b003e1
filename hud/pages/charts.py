"""DataFrames → plotly.js figures for the HUD pages. Pure: no ORM, no settings, no plotly.

Figures are plain plotly.js JSON (`data` + `layout` dicts), built directly: no figure objects,
no per-request validation or deep copies (issue 14). The templates embed them with
`chart_json` (hud_format) and draw them with the plotly.js served from static (no CDN). Colours are
Okabe–Ito, so they stay distinct for colour-blind readers; every trace also has a name in the
legend. tests/pages/test_charts.py checks each figure against plotly's own validator.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

Figure = dict[str, Any]

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
# plotly.py 6.5's "plotly_white" template, as `go.Figure(...).to_json()` expanded it (plotly.js
# has no named templates, so every figure carries it).
PLOTLY_WHITE: dict[str, Any] = json.loads(
    Path(__file__).with_name("plotly_white.json").read_text(encoding="utf-8")
)
BASE_LAYOUT: dict[str, Any] = {
    # Room below the x axis for the date ticks' second line (the year) and the legend.
    "margin": {"l": 55, "r": 40, "t": 60, "b": 60},
    "height": 300,
    "hovermode": "x unified",
    "legend": {"orientation": "h", "y": -0.25},
    "font": {"family": "system-ui, sans-serif", "size": 12},
    # plotly.js has no named templates: the figure carries the whole one.
    "template": PLOTLY_WHITE,
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


def _clean(value: Any) -> Any:
    if value is None or isinstance(value, (str, int)):  # most of a figure (bool is an int)
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is PLOTLY_WHITE:  # plain JSON already, and the largest part of every layout
        return value
    if isinstance(value, dict):
        return {key: _clean(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        # A trace's x/y/customdata lists: one look at their types instead of a call per value.
        kinds = set(map(type, value))
        if kinds <= _PLAIN:
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


def _axis_name(kind: str, row: int) -> str:
    """`xaxis`/`yaxis` of row 1, `xaxis2`… below (the layout key; traces use `x`, `x2`…)."""
    return kind if row == 1 else f"{kind}{row}"


def _trace(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


def _add(figure: Figure, trace: dict[str, Any], row: int | None = None) -> None:
    if row is not None:
        trace = {**trace, "xaxis": "x" if row == 1 else f"x{row}"}
        trace["yaxis"] = "y" if row == 1 else f"y{row}"
    figure["data"].append(trace)


def _update_yaxis(figure: Figure, row: int, **axis: Any) -> None:
    figure["layout"].setdefault(_axis_name("yaxis", row), {}).update(axis)


def _subplots(titles: list[str], vertical_spacing: float) -> Figure:
    """Rows of one column sharing the x axis, each titled: what `make_subplots` laid out."""
    rows = len(titles)
    height = (1 - vertical_spacing * (rows - 1)) / rows
    layout: dict[str, Any] = {}
    annotations = []
    for row, title in enumerate(titles, start=1):
        bottom = (height + vertical_spacing) * (rows - row)
        top = bottom + height
        x_axis: dict[str, Any] = {"anchor": "y" if row == 1 else f"y{row}", "domain": [0.0, 1.0]}
        if row < rows:
            x_axis.update(matches=f"x{rows}" if rows > 1 else "x", showticklabels=False)
        layout[_axis_name("xaxis", row)] = x_axis
        layout[_axis_name("yaxis", row)] = {
            "anchor": "x" if row == 1 else f"x{row}",
            "domain": [bottom, top],
        }
        annotations.append(
            {
                "font": {"size": 16},
                "showarrow": False,
                "text": title,
                "x": 0.5,
                "xanchor": "center",
                "xref": "paper",
                "y": top,
                "yanchor": "bottom",
                "yref": "paper",
            }
        )
    layout["annotations"] = annotations
    return _figure(**layout)


def _days(daily: pd.DataFrame) -> list[str]:
    return [str(day) for day in daily["day"]]


def _percent(series: pd.Series) -> list[float | None]:
    # `value != value` is NaN's test: pd.isna per value cost more than the rest of the loop.
    return [
        None if value is None or value != value else round(float(value) * 100, 2)
        for value in series.tolist()
    ]


def _band(days: list[str], rows: pd.DataFrame, **extra: Any) -> dict[str, Any]:
    """The shaded 95% interval of a daily rate: up along `high`, back along `low`.

    Days without a value have no interval (a 0–100 % "interval" of nothing is not shown).
    """
    high, low = _band_bounds(rows)
    return _band_trace(days, high, low, **extra)


def _band_bounds(rows: pd.DataFrame) -> tuple[list[float | None], list[float | None]]:
    """The band's upper and lower bounds in %, None on days without a value."""
    known = rows["value" if "value" in rows else "pass_rate"].notna()
    return _percent(rows["high"].where(known)), _percent(rows["low"].where(known))


def _band_trace(
    days: list[str], high: list[float | None], low: list[float | None], **extra: Any
) -> dict[str, Any]:
    return {
        "type": "scatter",
        "x": days + days[::-1],
        "y": high + low[::-1],
        "mode": "lines",
        "fill": "toself",
        "fillcolor": BAND_FILL,
        "line": {"width": 0},
        "hoverinfo": "skip",
        "name": "95% interval",
        **extra,
    }


def has_data(daily: pd.DataFrame) -> bool:
    """Whether a daily frame holds any counted job or any run (else the chart says so)."""
    return not daily.empty and bool((daily["n"] > 0).any() or (daily["runs"] > 0).any())


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
    _add(figure, _band(days, daily))
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
    figure = _subplots(names, 0.08)
    for index, name in enumerate(names, start=1):
        rows = history[history["metric"] == name]
        days = [str(t.date()) if hasattr(t, "date") else str(t) for t in rows["as_of"]]
        _add(figure, _band(days, rows, showlegend=index == 1, legendgroup="band"), index)
        _add(
            figure,
            _trace(
                "scatter",
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
            index,
        )
        threshold = float(rows["threshold"].iloc[0]) * 100
        _add(
            figure,
            _trace(
                "scatter",
                x=[days[0], days[-1]],
                y=[threshold, threshold],
                mode="lines",
                line={"color": FAILURE_COLOUR, "dash": "dash"},
                name="threshold",
                showlegend=index == 1,
                legendgroup="threshold",
                hovertemplate=f"threshold {rows['direction'].iloc[0]} {threshold:g}%",
            ),
            index,
        )
        _update_yaxis(figure, index, ticksuffix="%")
    return _layout(
        figure,
        "Gated rates as of each day (policy window, 95% interval)",
        height=max(260, 190 * len(names)),
    )


def _panels(backends: list[str], title: str) -> Figure:
    """One full-width panel per backend, sharing the day axis (small multiples)."""
    figure = _subplots(backends, min(0.08, 0.5 / len(backends)))
    return _layout(figure, title, height=90 + PANEL_HEIGHT * len(backends), showlegend=False)


def _backends(daily: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(daily["downstream"])) if not daily.empty else []


def _by_backend(daily: pd.DataFrame) -> Iterator[tuple[int, str, Callable[[list], list]]]:
    """(panel number, backend, what cuts its values out of a whole column's list) in the order
    `_backends` gives: each column is converted once for every backend, then cut into panels
    (a sub-frame per backend and its columns cost more than the panels' values)."""
    positions = daily.groupby("downstream", sort=False).indices
    for index, name in enumerate(_backends(daily), start=1):

        def cut(values: list, rows=positions[name]) -> list:
            return [values[i] for i in rows]

        yield index, name, cut


def backends_pass_rate_figure(daily: pd.DataFrame) -> Figure:
    """Daily pass rate, one panel per backend with its 95% band."""
    title = "Job pass rate per day (%)"
    if not has_data(daily):
        return _no_data(title)
    figure = _panels(_backends(daily), title)
    days, rates, counts = _days(daily), _percent(daily["pass_rate"]), daily["n"].tolist()
    high, low = _band_bounds(daily)
    symbols = ["circle" if ok else "circle-open" for ok in daily["sufficient"].astype(bool)]
    for index, name, cut in _by_backend(daily):
        _add(figure, _band_trace(cut(days), cut(high), cut(low)), index)
        _add(
            figure,
            _trace(
                "scatter",
                x=cut(days),
                y=cut(rates),
                mode="lines+markers",
                name=name,
                line={"color": SUCCESS_COLOUR},
                marker={"symbol": cut(symbols), "size": 6},
                customdata=cut(counts),
                hovertemplate="%{y:.1f}% of %{customdata}<extra>" + name + "</extra>",
            ),
            index,
        )
        _update_yaxis(figure, index, range=[0, 100.5], ticksuffix="%", dtick=50)
    return figure


def backends_count_figure(daily: pd.DataFrame, column: str) -> Figure:
    """A daily count (`failures` or `runs`) per backend, one panel per backend."""
    titles = {
        "failures": "Failed, timed out or cancelled per day",
        "runs": "Attempts that ran per day",
    }
    title = titles.get(column, column)
    if not has_data(daily):
        return _no_data(title)
    figure = _panels(_backends(daily), title)
    colour = FAILURE_COLOUR if column == "failures" else SUCCESS_COLOUR
    days, counts = _days(daily), daily[column].tolist()
    for index, name, cut in _by_backend(daily):
        values = cut(counts)
        _add(
            figure,
            _trace(
                "bar",
                x=cut(days),
                y=values,
                name=name,
                marker={"color": colour},
                hovertemplate="%{y}<extra>" + name + "</extra>",
            ),
            index,
        )
        _update_yaxis(figure, index, **count_axis(float(max(values))))
    return figure
