"""Charts read at a glance: one panel per backend, whole-number count ticks, honest empty states."""

import datetime as dt
import json
import math

import numpy as np
import pandas as pd
import pytest

from hud import stats
from hud.pages import charts

START = dt.date(2026, 11, 1)


def _day(downstream: str, offset: int, successes: int, failures: int, runs: int) -> dict:
    n = successes + failures
    rate = successes / n if n else math.nan
    low, high = stats.wilson_interval(successes, n) if n else (0.0, 1.0)
    return {
        "downstream": downstream,
        "day": START + dt.timedelta(days=offset),
        "pass_rate": rate,
        "low": low,
        "high": high,
        "n": n,
        "sufficient": n >= 10,
        "successes": successes,
        "failures": failures,
        "timed_out": 0,
        "runs": runs,
        "mean_execution_seconds": 600.0 if runs else math.nan,
        "p50_execution_seconds": 600.0 if runs else math.nan,
        "mean_end_to_end_seconds": 700.0 if runs else math.nan,
        "p50_end_to_end_seconds": 700.0 if runs else math.nan,
    }


def _daily(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["downstream", *stats.DAILY_COLUMNS])


BACKENDS = ("org/a", "org/b", "org/c")
DAILY = _daily(
    [_day(name, offset, 3, offset % 2, 4) for name in BACKENDS for offset in range(5)]
    + [_day("org/c", 5, 0, 0, 0)]
)


def _json(figure) -> dict:
    return charts.figure_json(figure)


def test_metrics_charts_draw_one_full_width_panel_per_backend():
    for figure in (
        charts.backends_pass_rate_figure(DAILY),
        charts.backends_count_figure(DAILY, "failures"),
        charts.backends_count_figure(DAILY, "runs"),
    ):
        data = _json(figure)
        titles = [a["text"] for a in data["layout"]["annotations"]]
        assert titles == list(BACKENDS)
        axes = {trace.get("yaxis", "y") for trace in data["data"]}
        assert axes == {"y", "y2", "y3"}
        assert data["layout"]["showlegend"] is False
        assert "barmode" not in data["layout"]  # no grouped bars


def test_count_axes_tick_by_whole_numbers():
    data = _json(charts.backends_count_figure(DAILY, "failures"))
    for axis in ("yaxis", "yaxis2", "yaxis3"):
        assert data["layout"][axis]["tickformat"] == ",d"
        assert data["layout"][axis]["dtick"] == 1  # at most one failure a day: no 0.5 ticks
    busy = _daily([_day("org/a", offset, 40, 20, 80) for offset in range(3)])
    runs = _json(charts.backends_count_figure(busy, "runs"))["layout"]["yaxis"]
    assert runs["tickformat"] == ",d" and "dtick" not in runs
    volume = _json(charts.volume_figure(busy.drop(columns="downstream")))["layout"]["yaxis"]
    assert volume["tickformat"] == ",d" and volume["rangemode"] == "tozero"


def test_the_band_has_no_interval_on_days_without_results():
    data = _json(charts.backends_pass_rate_figure(DAILY))
    band = next(t for t in data["data"] if t["name"] == "95% interval" and t["yaxis"] == "y3")
    assert band["mode"] == "lines"
    days = len(band["x"]) // 2
    high, low_reversed = band["y"][:days], band["y"][days:]
    assert high[-1] is None and low_reversed[0] is None  # the empty sixth day of org/c
    assert all(value is not None for value in high[:-1])


def test_no_data_draws_a_note_without_axes_band_or_traces():
    empty = _daily([_day("org/l1", offset, 0, 0, 0) for offset in range(7)])
    figures = (
        charts.pass_rate_figure(empty.drop(columns="downstream")),
        charts.volume_figure(empty.drop(columns="downstream")),
        charts.duration_figure(empty.drop(columns="downstream")),
        charts.backends_pass_rate_figure(empty),
        charts.backends_count_figure(empty, "runs"),
        charts.backends_count_figure(_daily([]), "failures"),
    )
    for figure in figures:
        data = _json(figure)
        assert data["data"] == []
        assert data["layout"]["xaxis"]["visible"] is False
        assert data["layout"]["yaxis"]["visible"] is False
        assert [a["text"] for a in data["layout"]["annotations"]] == [charts.NO_DATA]


def test_the_toolbar_stands_clear_of_the_title():
    layout = _json(charts.backends_pass_rate_figure(DAILY))["layout"]
    assert layout["modebar"]["orientation"] == "v"
    assert layout["title"]["x"] == 0


def test_every_figure_is_valid_plotly_js_json():
    """The dicts are built without plotly; plotly's own validator (a dev dependency) accepts
    every trace and layout property, and reads back the same figure."""
    go = pytest.importorskip("plotly.graph_objects")
    one = DAILY[DAILY["downstream"] == "org/a"].drop(columns="downstream")
    history = pd.DataFrame(
        [
            {
                "metric": metric,
                "as_of": pd.Timestamp("2026-11-01", tz="UTC") + pd.Timedelta(days=offset),
                "value": 0.9 if offset % 3 else math.nan,
                "low": 0.8,
                "high": 0.95,
                "n": 20,
                "threshold": 0.85,
                "direction": ">=",
            }
            for metric in ("job_pass_rate", "flake_rate")
            for offset in range(7)
        ]
    )
    figures = [
        charts.pass_rate_figure(one),
        charts.volume_figure(one),
        charts.duration_figure(one),
        charts.gate_history_figure(history),
        charts.backends_pass_rate_figure(DAILY),
        charts.backends_count_figure(DAILY, "failures"),
        charts.pass_rate_figure(_daily([]).drop(columns="downstream")),
    ]
    for figure in figures:
        data = _json(figure)
        assert json.loads(json.dumps(data, allow_nan=False)) == data
        checked = json.loads(go.Figure(data).to_json())
        assert checked["data"] == data["data"]
        assert checked["layout"] == data["layout"]


def test_figure_json_makes_every_nan_and_infinity_null_and_numpy_plain():
    figure = {
        "data": [
            {"x": ["a", "b", None], "y": [1.5, math.nan, 2, None, math.inf], "flags": [True, 3]},
            {"y": (np.float64("nan"), np.int64(4), -math.inf), "customdata": [[1.0, math.nan]]},
        ],
        "layout": {"template": charts.PLOTLY_WHITE, "height": np.float64(2.5)},
    }

    data = charts.figure_json(figure)

    assert data["data"][0] == {
        "x": ["a", "b", None],
        "y": [1.5, None, 2, None, None],
        "flags": [True, 3],
    }
    assert data["data"][1] == {"y": [None, 4, None], "customdata": [[1.0, None]]}
    assert type(data["data"][1]["y"][1]) is int
    assert data["layout"] == {"template": charts.PLOTLY_WHITE, "height": 2.5}
    assert json.loads(json.dumps(data, allow_nan=False)) == data


def test_chart_json_is_json_script_escaped_and_compact():
    from django.utils.html import json_script

    from hud.templatetags.hud_format import chart_json

    figure = {"data": [{"name": "</script><b>&'\"", "y": [1, None]}], "layout": {"title": "é"}}

    html = chart_json(figure, "chart-x")

    head, tail = '<script id="chart-x" type="application/json">', "</script>"
    assert html.startswith(head) and html.endswith(tail)
    body = html[len(head) : -len(tail)]
    assert not {"<", ">", "&"} & set(body)
    assert json.loads(body) == figure
    assert json.loads(json_script(figure, "chart-x")[len(head) : -len(tail)]) == figure
    with pytest.raises(ValueError):
        chart_json({"data": [{"y": [math.nan]}]}, "chart-x")


def test_chart_json_writes_dates_and_decimals_as_json_script_does():
    from decimal import Decimal

    from django.utils.html import json_script

    from hud.templatetags.hud_format import chart_json

    figure = {"data": [{"x": [dt.date(2026, 12, 6)], "y": [Decimal("0.5")]}]}
    head, tail = '<script id="c" type="application/json">', "</script>"

    ours, django = chart_json(figure, "c"), json_script(figure, "c")

    assert json.loads(ours.removeprefix(head).removesuffix(tail)) == {
        "data": [{"x": ["2026-12-06"], "y": ["0.5"]}]
    }
    assert json.loads(ours.removeprefix(head).removesuffix(tail)) == json.loads(
        django.removeprefix(head).removesuffix(tail)
    )
