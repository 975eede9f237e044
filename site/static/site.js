// Draws every chart from its data-figure attribute (plotly figure JSON); marks it when drawn.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var charts = document.querySelectorAll("div.chart[data-figure]");
  charts.forEach(function (div) {
    var fig = JSON.parse(div.getAttribute("data-figure"));
    Plotly.newPlot(div, fig.data, fig.layout, {responsive: true, displaylogo: false})
      .then(function () { div.setAttribute("data-drawn", String(fig.data.length)); })
      .catch(function (err) { console.error("chart " + div.id + ": " + err); });
  });
});
