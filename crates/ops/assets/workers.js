// The workers views of the dashboard: #/workers (every protocol's workers: a WMP worker's
// path, roles, manager, leases and last contact) and #/jobd (jobd targets with their
// launcher processes). Fed by /admin/api/workers and /admin/api/processes, a page at a time;
// uses the helpers of app.js ($, esc, num, enc, api).
"use strict";

const WORKERS_PAGE = 50;

function ago(s) {
  if (s < 1) return "now";
  if (s < 120) return Math.round(s) + " s ago";
  if (s < 7200) return Math.round(s / 60) + " min ago";
  return Math.round(s / 3600) + " h ago";
}

function span(s) {
  if (s < 1) return Math.round(s * 1000) + " ms";
  if (s < 120) return s.toFixed(1) + " s";
  if (s < 7200) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  return (s / 3600).toFixed(1) + " h";
}

function pager(id, base, next) {
  return next ? `<p><a id="${id}" href="${base}/${enc(next)}">next page →</a></p>` : "";
}

async function workersView(after) {
  const page = await api(`/workers?limit=${WORKERS_PAGE}${after ? "&after=" + enc(after) : ""}`);
  const rows = page.workers
    .map((w) => {
      const queues = w.any_queue ? '<span class="muted">any</span>' : w.queues.map((q) => esc(q.name)).join(", ");
      const jobs = w.jobs
        .map((j) => `<a href="#/job/${j.id}" title="${esc(j.queue)}, attempt ${j.attempt}">${j.id}</a>`)
        .join(" ");
      const detail = Object.entries(w.detail)
        .map(([k, v]) => `<span class="muted">${esc(k)}</span> ${esc(v)}`)
        .join("<br>");
      return `<tr data-protocol="${esc(w.protocol)}" data-worker="${esc(w.id)}">
        <td>${esc(w.protocol)}</td><td class="body">${esc(w.id)}</td><td>${queues}</td>
        <td class="num" data-k="in-flight">${num(w.in_flight)}</td><td>${jobs}${w.in_flight > w.jobs.length ? " …" : ""}</td>
        <td data-k="last-seen">${ago(w.last_seen_s)}</td><td>${detail}</td></tr>`;
    })
    .join("");
  $("#view").innerHTML = `<h1>Workers</h1>
    <p class="muted">${num(page.total)} workers known to their front ends (WMP workers by their READYs and leases,
    jobd workers by their targets)${page.unlisted ? ", " + num(page.unlisted) + " not listed (registry full)" : ""}.</p>
    <table id="workers"><tr><th>protocol</th><th>worker</th><th>queues (roles)</th><th class="num">in flight</th>
    <th>jobs</th><th>last seen</th><th>detail</th></tr>${rows ||
      '<tr><td colspan="7" class="muted">no workers</td></tr>'}</table>${pager("next-workers", "#/workers", page.next)}`;
}

async function jobdView(after) {
  const daemons = await api("/workers?protocol=jobd&limit=" + WORKERS_PAGE);
  const procs = await api(`/processes?protocol=jobd&limit=${WORKERS_PAGE}${after ? "&after=" + enc(after) : ""}`);
  const targets = daemons.workers
    .flatMap((w) =>
      w.queues.map(
        (q) => `<tr data-target="${esc(q.name)}"><td><a href="#/queue/${enc(q.name)}/ready">${esc(q.name)}</a>
        ${q.paused ? '<span class="muted">(paused)</span>' : ""}</td><td class="body">${esc(w.id)}</td>
        <td class="num" data-k="concurrency">${num(q.lease_limit)}</td><td class="num" data-k="running">${num(q.reserved)}</td>
        <td class="num" data-k="queued">${num(q.ready)}</td></tr>`
      )
    )
    .join("");
  const rows = procs.processes
    .map(
      (p) => `<tr data-pid="${p.pid}" data-job="${p.job}"><td class="num">${p.pid}</td><td>${esc(p.label)}
      <span class="muted">(<a href="#/job/${p.job}">job ${p.job}</a>)</span></td><td>${esc(p.queue)}</td>
      <td>${new Date(p.started_ms).toLocaleTimeString()}</td><td class="num" data-k="running-for">${span(p.running_s)}</td>
      <td class="body">${esc(p.command.join(" "))}</td></tr>`
    )
    .join("");
  $("#view").innerHTML = `<h1>jobd targets and launcher processes</h1>
    <table id="targets"><tr><th>target</th><th>worker</th><th class="num">concurrency</th><th class="num">running</th>
    <th class="num">accepted, waiting</th></tr>${targets ||
      '<tr><td colspan="5" class="muted">no jobd worker in this server (serve --jobd-config)</td></tr>'}</table>
    <h2>Launcher processes (${num(procs.total)} running)</h2>
    <table id="processes"><tr><th class="num">pid</th><th>job</th><th>target</th><th>started</th><th class="num">running for</th>
    <th>command</th></tr>${rows ||
      '<tr><td colspan="6" class="muted">no launcher running</td></tr>'}</table>${pager("next-processes", "#/jobd", procs.next)}`;
}

window.workersView = workersView;
window.jobdView = jobdView;
