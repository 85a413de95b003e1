// Draws every figure embedded with json_script (see templates/hud/_chart.html and
// hud/pages/charts.py): gives it the plotly_white template (plotly-white.js), lays out small
// multiples sent as one panel's traces plus each panel's values ("panels"), and closes
// interval bands ("band": up along `high`, back along `low`).
(function () {
  "use strict";
  var hud = window.crcrHud = window.crcrHud || {};

  function isObject(value) {
    return value !== null && typeof value === "object" && !Array.isArray(value);
  }

  // `base` with `extra` laid over it, nested objects merged (a panel's marker symbols into
  // the style's marker size); neither is changed.
  function merged(base, extra) {
    var out = Object.assign({}, base);
    Object.keys(extra).forEach(function (key) {
      out[key] = isObject(out[key]) && isObject(extra[key]) ? merged(out[key], extra[key]) : extra[key];
    });
    return out;
  }

  function closeBand(trace) {
    if (!trace.band) { return trace; }
    var out = Object.assign({}, trace);
    delete out.band; delete out.high; delete out.low;
    out.x = trace.x.concat(trace.x.slice().reverse());
    out.y = trace.high.concat(trace.low.slice().reverse());
    return out;
  }

  // The rows of one column that plotly.py's make_subplots(shared_xaxes=True) lays out: each
  // panel its own y axis and title, every x axis matched to the bottom one.
  function layOut(figure) {
    var panels = figure.panels;
    var rows = panels.titles.length, gap = panels.spacing;
    var height = (1 - gap * (rows - 1)) / rows;
    var layout = Object.assign({}, figure.layout), data = figure.data.slice(), titles = [];
    panels.titles.forEach(function (title, index) {
      var row = index + 1, suffix = row === 1 ? "" : String(row);
      var bottom = (height + gap) * (rows - row), top = bottom + height;
      var xaxis = { anchor: "y" + suffix, domain: [0, 1] };
      if (row < rows) {
        xaxis.matches = "x" + rows;
        xaxis.showticklabels = false;
      }
      layout["xaxis" + suffix] = xaxis;
      layout["yaxis" + suffix] = Object.assign({ anchor: "x" + suffix, domain: [bottom, top] }, panels.yaxes[index]);
      titles.push({
        font: { size: 16 }, showarrow: false, text: title, x: 0.5, xanchor: "center",
        xref: "paper", y: top, yanchor: "bottom", yref: "paper"
      });
      panels.traces.forEach(function (style, at) {
        var trace = merged(merged(style, { x: panels.x }), panels.values[index][at]);
        trace.xaxis = "x" + suffix;
        trace.yaxis = "y" + suffix;
        data.push(trace);
      });
    });
    layout.annotations = titles.concat(layout.annotations || []);
    return { data: data, layout: layout };
  }

  // The plotly.js figure a figure of charts.py stands for.
  function expanded(figure) {
    var plain = figure.panels ? layOut(figure) : figure;
    return {
      data: plain.data.map(closeBand),
      layout: Object.assign({ template: hud.plotlyTemplate }, plain.layout)
    };
  }

  function draw() {
    if (typeof Plotly === "undefined") { return; }
    document.querySelectorAll("[data-figure]").forEach(function (el) {
      var source = document.getElementById(el.dataset.figure);
      if (!source || el.dataset.drawn === "true") { return; }
      var figure = expanded(JSON.parse(source.textContent));
      Plotly.newPlot(el, figure.data, figure.layout, { displaylogo: false, responsive: true, displayModeBar: "hover" });
      el.setAttribute("data-drawn", "true");
    });
  }
  hud.plotlyFigure = expanded;  // what is drawn of a figure (tests/pages/test_charts.py reads it)
  hud.drawCharts = draw;  // refresh.js redraws the charts of swapped-in content
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
