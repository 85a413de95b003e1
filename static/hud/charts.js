// Draws every figure embedded with json_script (see templates/hud/_chart.html).
(function () {
  "use strict";
  function draw() {
    if (typeof Plotly === "undefined") { return; }
    document.querySelectorAll("[data-figure]").forEach(function (el) {
      var source = document.getElementById(el.dataset.figure);
      if (!source || el.dataset.drawn === "true") { return; }
      var figure = JSON.parse(source.textContent);
      Plotly.newPlot(el, figure.data, figure.layout, { displaylogo: false, responsive: true, displayModeBar: "hover" });
      el.setAttribute("data-drawn", "true");
    });
  }
  window.crcrHud = window.crcrHud || {};
  window.crcrHud.drawCharts = draw;  // refresh.js redraws the charts of swapped-in content
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
