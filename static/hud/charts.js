// Draws every figure embedded with json_script (see templates/hud/_chart.html).
(function () {
  "use strict";
  function draw() {
    if (typeof Plotly === "undefined") { return; }
    document.querySelectorAll("[data-figure]").forEach(function (el) {
      var source = document.getElementById(el.dataset.figure);
      if (!source) { return; }
      var figure = JSON.parse(source.textContent);
      Plotly.newPlot(el, figure.data, figure.layout, { displaylogo: false, responsive: true, displayModeBar: "hover" });
      el.setAttribute("data-drawn", "true");
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
