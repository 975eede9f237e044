// memlab site: draws every chart from its data-figure attribute (plotly figure JSON) and marks it
// when drawn; sorts tables by a click on a header (numbers by their data-sort value); shows one
// configuration panel of a family at a time (selector, links and #anchors).
"use strict";

function drawCharts() {
  document.querySelectorAll("div.chart[data-figure]").forEach(function (div) {
    var fig = JSON.parse(div.getAttribute("data-figure"));
    Plotly.newPlot(div, fig.data, fig.layout, {responsive: true, displaylogo: false})
      .then(function () { div.setAttribute("data-drawn", String(fig.data.length)); })
      .catch(function (err) { console.error("chart " + div.id + ": " + err); });
  });
}

// -- sortable tables: numeric columns (th[data-type=num]) by each cell's data-sort, empty last ----
function sortValue(cell, numeric) {
  if (!cell) { return null; }
  if (numeric) {
    var raw = cell.getAttribute("data-sort");
    var n = raw === null || raw === "" ? NaN : Number(raw);
    return isNaN(n) ? null : n;
  }
  var text = cell.getAttribute("data-sort") || cell.textContent.trim();
  return text === "" || text === "-" ? null : text;
}

function sortTable(th) {
  var table = th.closest("table");
  var tbody = table.tBodies[0];
  var index = Array.prototype.indexOf.call(th.parentNode.children, th);
  var numeric = th.getAttribute("data-type") === "num";
  var ascending = th.getAttribute("aria-sort") !== "ascending";
  th.parentNode.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
  th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  var rows = Array.prototype.slice.call(tbody.rows).map(function (row, i) {
    return {row: row, i: i, v: sortValue(row.cells[index], numeric)};
  });
  rows.sort(function (a, b) {
    if (a.v === null || b.v === null) {
      return a.v === b.v ? a.i - b.i : (a.v === null ? 1 : -1);  // missing values last either way
    }
    var c = numeric ? a.v - b.v : String(a.v).localeCompare(String(b.v), undefined, {numeric: true});
    return (ascending ? c : -c) || a.i - b.i;
  });
  rows.forEach(function (r) { tbody.appendChild(r.row); });
}

function setUpTables() {
  document.querySelectorAll("table.sortable thead th").forEach(function (th) {
    th.setAttribute("tabindex", "0");
    th.addEventListener("click", function () { sortTable(th); });
    th.addEventListener("keydown", function (e) {
      if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortTable(th); }
    });
  });
}

// -- configuration panels: one visible per family ------------------------------------------------
function showPanel(id) {
  var panel = document.getElementById(id);
  if (!panel || !panel.classList.contains("config-panel")) { return false; }
  var group = panel.getAttribute("data-group");
  document.querySelectorAll('.config-panel[data-group="' + group + '"]').forEach(function (p) {
    p.hidden = p !== panel;
  });
  var select = document.querySelector('select.config-select[data-group="' + group + '"]');
  if (select) { select.value = id; }
  panel.querySelectorAll("div.chart[data-drawn]").forEach(function (div) { Plotly.Plots.resize(div); });
  markScrollingTables();
  return true;
}

function followHash() {
  var id = decodeURIComponent(location.hash.slice(1));
  var target = id && document.getElementById(id);
  if (!target) { return; }
  var panel = target.closest(".config-panel");
  if (panel && panel.hidden) {
    showPanel(panel.id);
    target.scrollIntoView();
  }
}

function setUpPanels() {
  document.querySelectorAll("select.config-select").forEach(function (select) {
    select.addEventListener("change", function () { showPanel(select.value); });
  });
  window.addEventListener("hashchange", followHash);
  followHash();
}

// A table wider than its frame scrolls inside it: mark the frame (the CSS shades its edge and says so).
function markScrollingTables() {
  document.querySelectorAll("div.table-box").forEach(function (box) {
    box.classList.toggle("scrolls", box.scrollWidth > box.clientWidth + 1);
  });
}

document.addEventListener("DOMContentLoaded", function () {
  setUpTables();
  setUpPanels();
  drawCharts();
  markScrollingTables();
  window.addEventListener("resize", markScrollingTables);
  // tables a page's script builds later (the Choose page's answers) are marked once drawn
  var pending = false;
  new MutationObserver(function () {
    if (pending) { return; }
    pending = true;
    requestAnimationFrame(function () { pending = false; markScrollingTables(); });
  }).observe(document.body, {childList: true, subtree: true});
});
