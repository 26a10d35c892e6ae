// The dashboard's charts: the server's own history (/admin/api/history, sampled once a
// second) drawn as SVG by hand, overall or for one queue, over the last 5 minutes or hour.
// Three charts: jobs put/completed/failed per second, depth by state, lease-to-complete
// percentiles. Uses the helpers of app.js ($, esc, num, enc, api).
"use strict";

const WINDOWS = [
  { s: 300, label: "5 min" },
  { s: 3600, label: "1 hour" },
];
let chartWindow = 300;
// The queue the overview charts (null: all of them), chosen in its charts' bar.
let overviewQueue = null;

const CHARTS = [
  {
    id: "rates",
    title: "jobs per second",
    series: [
      { k: "put", name: "put", color: "#2f6fdf" },
      { k: "completed", name: "completed", color: "#2e9d5b" },
      { k: "failed", name: "failed", color: "#c0392b" },
    ],
    fmt: (v) => (v >= 100 ? Math.round(v).toLocaleString("en-US") : v.toFixed(v >= 10 ? 0 : 1)),
  },
  {
    id: "depth",
    title: "jobs by state",
    series: [
      { k: "ready", name: "ready", color: "#2f6fdf" },
      { k: "reserved", name: "reserved", color: "#e08a1e" },
      { k: "delayed", name: "delayed", color: "#8e6fd8" },
      { k: "buried", name: "buried", color: "#c0392b" },
    ],
    fmt: (v) => Math.round(v).toLocaleString("en-US"),
  },
  {
    id: "latency",
    title: "lease to complete",
    series: [
      { k: "p50_ms", name: "p50", color: "#2e9d5b" },
      { k: "p95_ms", name: "p95", color: "#e08a1e" },
      { k: "p99_ms", name: "p99", color: "#c0392b" },
    ],
    fmt: (v) => (v >= 1000 ? (v / 1000).toFixed(v >= 10000 ? 0 : 1) + " s" : v >= 10 ? Math.round(v) + " ms" : v.toFixed(1) + " ms"),
  },
];

// A round number at or above `v`, for the top of an axis.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((m) => m >= v);
}

// The span a chart covers: the window asked for, or less while the server is younger than
// it (at least a minute), so a fresh server's first minutes are not squeezed into an edge.
function chartSpan(h) {
  const t = h.t;
  if (!t.length) return { t0: 0, t1: 1 };
  const t1 = t[t.length - 1];
  return { t0: Math.max(t1 - h.window_s, Math.min(t[0] - h.step_s, t1 - 60)), t1 };
}

function spanLabel(s) {
  return s >= 120 ? Math.round(s / 60) + " min" : Math.round(s) + " s";
}

// One chart as an SVG string `W` pixels wide (drawn at its real size, so text stays
// legible): lines over time (null values break a line), a legend with each series' latest
// value, a y axis from 0 to a round maximum.
function svgChart(chart, h, W) {
  const H = 190, L = 50, R = 12, T = 44, B = 20;
  const t = h.t;
  const { t0, t1 } = chartSpan(h);
  const x = (ts) => L + ((ts - t0) / Math.max(1, t1 - t0)) * (W - L - R);
  const all = chart.series.flatMap((s) => h[s.k] || []).filter((v) => v !== null);
  const top = niceMax(Math.max(0, ...all));
  const y = (v) => T + (1 - v / top) * (H - T - B);
  const grid = [0, 0.5, 1]
    .map((f) => `<line x1="${L}" x2="${W - R}" y1="${y(top * f)}" y2="${y(top * f)}" class="grid"/>
      <text x="${L - 5}" y="${y(top * f) + 4}" text-anchor="end">${chart.fmt(top * f)}</text>`)
    .join("");
  const lines = chart.series
    .map((s) => {
      const vals = h[s.k] || [];
      let d = "";
      let pen = false;
      vals.forEach((v, i) => {
        if (v === null || t[i] < t0) return (pen = false);
        d += (pen ? "L" : "M") + x(t[i]).toFixed(1) + "," + y(v).toFixed(1);
        pen = true;
      });
      const max = Math.max(0, ...vals.filter((v) => v !== null));
      return `<path d="${d}" stroke="${s.color}" data-series="${s.k}" data-max="${max}"/>`;
    })
    .join("");
  let lx = 12;
  const legend = chart.series
    .map((s) => {
      const vals = (h[s.k] || []).filter((v) => v !== null);
      const last = vals.length ? chart.fmt(vals[vals.length - 1]) : "–";
      const item = `<rect x="${lx}" y="25" width="10" height="10" rx="2" fill="${s.color}"/>
        <text x="${lx + 14}" y="34">${s.name} <tspan class="value">${last}</tspan></text>`;
      lx += 30 + (s.name.length + last.length) * 6.6;
      return item;
    })
    .join("");
  return `<svg width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" class="chart" data-chart="${chart.id}" role="img" aria-label="${chart.title}">
    <text x="12" y="16" class="title">${chart.title}</text>${legend}${grid}
    <text x="${L}" y="${H - 5}">−${spanLabel(t1 - t0)}</text>
    <text x="${W - R}" y="${H - 5}" text-anchor="end">now</text>
    <g class="lines">${lines}</g></svg>`;
}

// The window switches are links, not buttons: a read-only token hides every button, and
// looking is what it may do. The queue travels in a data attribute, never in script text.
function chartsSection(queue) {
  const buttons = WINDOWS.map(
    (w) => `<a href="#" role="button" data-window="${w.s}" class="${w.s === chartWindow ? "on" : ""}"
      onclick="return setChartWindow(${w.s}, this)">${w.label}</a>`
  ).join("");
  if (queue === null) {
    return `<div class="bar charts-bar"><select id="chart-queue" aria-label="queue charted"
      onchange="chooseChartQueue(this.value)"><option value="">All queues</option></select>
      <span class="muted">last</span>${buttons}</div><div id="charts" class="charts"></div>`;
  }
  return `<div class="bar charts-bar" data-queue="${esc(queue)}"><b>Queue ${esc(queue)}</b>
    <span class="muted">last</span>${buttons}</div><div id="charts" class="charts"></div>`;
}

// The overview's choice of queues, redrawn only when the queues change (an open list is
// not closed under the operator's pointer by every refresh).
function chartQueueChoices(names) {
  const select = $("#chart-queue");
  if (!select) return;
  const want = ["", ...names];
  if ([...select.options].map((o) => o.value).join("\n") === want.join("\n")) return;
  select.innerHTML = want.map((n) => `<option value="${esc(n)}">${n ? esc(n) : "All queues"}</option>`).join("");
  select.value = overviewQueue ?? "";
}

function chooseChartQueue(name) {
  overviewQueue = name || null;
  drawCharts(overviewQueue);
}

// Draws in #charts once the history arrives, unless a later draw was asked for meanwhile
// (another window, queue or page): a slow answer never paints over a newer choice.
let drawing = 0;
async function drawCharts(queue) {
  if (!$("#charts")) return;
  const mine = ++drawing;
  let h;
  try {
    h = await api(`/history?window=${chartWindow}${queue === null ? "" : "&queue=" + enc(queue)}`);
  } catch (e) {
    if (mine === drawing && $("#charts")) $("#charts").innerHTML = `<p class="muted">no history: ${esc(e.message)}</p>`;
    return;
  }
  const now = $("#charts");
  if (!now || mine !== drawing) return;
  // As many columns as fit at 340 px or more each, three at most.
  const gap = 12;
  const columns = Math.max(1, Math.min(3, Math.floor((now.clientWidth + gap) / (340 + gap))));
  const width = Math.floor((now.clientWidth - gap * (columns - 1)) / columns);
  now.style.gridTemplateColumns = `repeat(${columns}, ${width}px)`;
  now.innerHTML = CHARTS.map((c) => svgChart(c, h, width)).join("");
}

function setChartWindow(s, button) {
  const queue = button.closest(".charts-bar").dataset.queue ?? overviewQueue;
  chartWindow = s;
  document.querySelectorAll(".charts-bar a").forEach((b) => b.classList.toggle("on", +b.dataset.window === s));
  drawCharts(queue);
  return false;
}

window.setChartWindow = setChartWindow;
window.chooseChartQueue = chooseChartQueue;
