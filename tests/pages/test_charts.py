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
        panels = data["panels"]
        assert panels["titles"] == list(BACKENDS)
        assert len(panels["values"]) == len(panels["yaxes"]) == len(BACKENDS)
        assert all(len(values) == len(panels["traces"]) for values in panels["values"])
        assert data["data"] == []  # every trace is a panel's
        assert data["layout"]["showlegend"] is False
        assert "barmode" not in data["layout"]  # no grouped bars


def test_panels_carry_each_style_once_and_their_own_values_and_names():
    panels = _json(charts.backends_pass_rate_figure(DAILY))["panels"]
    days = [str(START + dt.timedelta(days=offset)) for offset in range(5)]
    assert panels["x"] == days
    (band, rate) = panels["traces"]
    assert band["band"] is True and band["fill"] == "toself" and "high" not in band
    assert rate["marker"] == {"size": 6} and "y" not in rate
    first_band, first_rate = panels["values"][0]
    assert set(first_band) == {"high", "low"} and "x" not in first_rate  # the shared days
    assert first_rate["name"] == "org/a"
    assert first_rate["hovertemplate"] == "%{y:.1f}% of %{customdata}<extra>org/a</extra>"
    assert first_rate["y"] == [100.0, 75.0, 100.0, 75.0, 100.0]
    assert first_rate["customdata"] == [3, 4, 3, 4, 3]
    assert first_rate["marker"] == {"symbol": ["circle-open"] * 5}  # n < 10
    # org/c reported a sixth day: its panel has its own days.
    assert panels["values"][2][1]["x"] == [*days, str(START + dt.timedelta(days=5))]


def test_count_axes_tick_by_whole_numbers():
    yaxes = _json(charts.backends_count_figure(DAILY, "failures"))["panels"]["yaxes"]
    for axis in yaxes:
        assert axis["tickformat"] == ",d"
        assert axis["dtick"] == 1  # at most one failure a day: no 0.5 ticks
    busy = _daily([_day("org/a", offset, 40, 20, 80) for offset in range(3)])
    (runs,) = _json(charts.backends_count_figure(busy, "runs"))["panels"]["yaxes"]
    assert runs["tickformat"] == ",d" and "dtick" not in runs
    volume = _json(charts.volume_figure(busy.drop(columns="downstream")))["layout"]["yaxis"]
    assert volume["tickformat"] == ",d" and volume["rangemode"] == "tozero"


def test_the_band_has_no_interval_on_days_without_results():
    band, _ = _json(charts.backends_pass_rate_figure(DAILY))["panels"]["values"][2]
    assert band["high"][-1] is None and band["low"][-1] is None  # the empty sixth day of org/c
    assert None not in band["high"][:-1] and None not in band["low"][:-1]


def test_the_metrics_page_charts_its_columns_as_it_would_their_frame():
    columns = {column: DAILY[column].tolist() for column in DAILY.columns}
    for build in (
        charts.backends_pass_rate_figure,
        lambda daily: charts.backends_count_figure(daily, "runs"),
    ):
        assert _json(build(columns)) == _json(build(DAILY))


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


def _figures() -> list[charts.Figure]:
    """A figure of every kind the pages draw."""
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
    return [
        charts.pass_rate_figure(one),
        charts.volume_figure(one),
        charts.duration_figure(one),
        charts.gate_history_figure(history),
        charts.backends_pass_rate_figure(DAILY),
        charts.backends_count_figure(DAILY, "failures"),
        charts.pass_rate_figure(_daily([]).drop(columns="downstream")),
    ]


def _drawn(browser, live_server, figures: list[charts.Figure]) -> list[dict]:
    """What static/hud/charts.js makes of each figure, in Chromium, for plotly.js to draw."""
    browser.get(f"{live_server.url}/crcr/metrics")
    script = "return arguments[0].map(window.crcrHud.plotlyFigure)"
    return browser.execute_script(script, [_json(figure) for figure in figures])


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_every_figure_charts_js_draws_is_valid_plotly_js_json(browser, live_server):
    """The dicts are built without plotly and laid out by charts.js; plotly's own validator
    (a dev dependency) accepts every trace and layout property of what is drawn, and reads
    back the same figure."""
    go = pytest.importorskip("plotly.graph_objects")

    drawn = _drawn(browser, live_server, _figures())

    assert len(drawn) == len(_figures())
    for figure in drawn:
        assert figure["layout"]["template"]["layout"]["plot_bgcolor"] == "white"
        assert not any("band" in trace or "high" in trace for trace in figure["data"])
        checked = json.loads(go.Figure(figure).to_json())
        assert checked["data"] == figure["data"]
        assert checked["layout"] == figure["layout"]


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_charts_js_lays_panels_out_as_make_subplots_does(browser, live_server):
    subplots = pytest.importorskip("plotly.subplots")
    figure = _json(charts.backends_pass_rate_figure(DAILY))
    spacing = figure["panels"]["spacing"]

    (drawn,) = _drawn(browser, live_server, [charts.backends_pass_rate_figure(DAILY)])

    made = subplots.make_subplots(
        rows=3, cols=1, shared_xaxes=True, vertical_spacing=spacing, subplot_titles=BACKENDS
    ).to_plotly_json()["layout"]
    for axis in ("xaxis", "xaxis2", "xaxis3", "yaxis", "yaxis2", "yaxis3"):
        for key in ("anchor", "matches", "showticklabels"):
            assert drawn["layout"][axis].get(key) == made[axis].get(key), (axis, key)
        assert drawn["layout"][axis]["domain"] == pytest.approx(list(made[axis]["domain"]))
    for ours, theirs in zip(drawn["layout"]["annotations"], made["annotations"], strict=True):
        assert {k: ours[k] for k in ("text", "xanchor", "yanchor", "xref", "yref")} == {
            k: theirs[k] for k in ("text", "xanchor", "yanchor", "xref", "yref")
        }
        assert (ours["x"], ours["y"]) == pytest.approx((theirs["x"], theirs["y"]))
    assert drawn["layout"]["yaxis3"]["ticksuffix"] == "%"  # the panel's own axis
    # Each panel's band is one closed shape over its days: up along high, back along low.
    band = next(t for t in drawn["data"] if t["name"] == "95% interval" and t["yaxis"] == "y3")
    days = [str(START + dt.timedelta(days=offset)) for offset in range(6)]
    assert band["x"] == days + days[::-1]
    assert band["y"][5] is None and band["y"][6] is None  # the sixth day has no interval
    rate = next(t for t in drawn["data"] if t.get("name") == "org/b")
    assert rate["marker"] == {"size": 6, "symbol": ["circle-open"] * 5}
    assert (rate["xaxis"], rate["yaxis"]) == ("x2", "y2")


def test_figure_json_makes_every_nan_and_infinity_null_and_numpy_plain():
    figure = {
        "data": [
            {"x": ["a", "b", None], "y": [1.5, math.nan, 2, None, math.inf], "flags": [True, 3]},
            {"y": (np.float64("nan"), np.int64(4), -math.inf), "customdata": [[1.0, math.nan]]},
        ],
        "layout": {"title": {"text": "t"}, "height": np.float64(2.5)},
    }

    data = charts.figure_json(figure)

    assert data["data"][0] == {
        "x": ["a", "b", None],
        "y": [1.5, None, 2, None, None],
        "flags": [True, 3],
    }
    assert data["data"][1] == {"y": [None, 4, None], "customdata": [[1.0, None]]}
    assert type(data["data"][1]["y"][1]) is int
    assert data["layout"] == {"title": {"text": "t"}, "height": 2.5}
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
