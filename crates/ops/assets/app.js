// jobyard's dashboard: a page per view (#/ queues, #/queue/NAME/STATE, #/job/ID,
// #/connections, from workers.js #/workers and #/jobd, from schedules.js #/schedules), fed by
// the admin JSON API (schedules, a queue's policy and dead letters in policy.js, the
// overview's cluster in cluster.js: the HTTP API); the charts are charts.js's. Lists are paged
// by the server; nothing here loads a whole queue.
"use strict";

const API = "/admin/api";
const REFRESH_MS = 2000;
let timer = null;

const $ = (sel) => document.querySelector(sel);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const num = (n) => (n ?? 0).toLocaleString("en-US");
const enc = encodeURIComponent;

async function api(path, method = "GET") {
  // location.origin, not a relative URL: a page opened as http://user:token@host/ would
  // make fetch refuse a URL carrying credentials; the browser resends them by itself.
  const res = await fetch(location.origin + API + path, { method, credentials: "same-origin" });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) {
    const msg = body.error ? body.error.message : res.status + " " + res.statusText;
    // The reply rides along: a finished job's 404 still carries its last attempts.
    throw Object.assign(new Error(msg), { body });
  }
  return body;
}

function toast(text, bad) {
  const t = $("#toast");
  t.textContent = text;
  t.className = bad ? "bad" : "";
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => (t.hidden = true), 4000);
}

async function act(path, done) {
  try {
    await api(path, "POST");
    toast("Done: " + path.split("/").slice(-1)[0]);
    if (done) done();
    route();
  } catch (e) {
    toast(e.message, true);
  }
}

async function queuesView() {
  const o = await api("/overview");
  $("#status").textContent = num(o.jobs) + " jobs" + (o.draining ? " · draining" : "");
  const rows = o.queues
    .map(
      (q) => `<tr data-queue="${esc(q.name)}">
      <td><a href="#/queue/${enc(q.name)}/ready">${esc(q.name)}</a>${q.paused ? ' <span class="muted">(paused)</span>' : ""}</td>
      <td class="num" data-k="ready">${num(q.ready)}</td><td class="num" data-k="reserved">${num(q.reserved)}</td>
      <td class="num" data-k="delayed">${num(q.delayed)}</td><td class="num" data-k="buried">${num(q.buried)}</td>
      <td class="num">${num(q.waiting)}</td><td class="num">${num(q.created)}</td>
      <td class="num">${num(q.completed)}</td><td class="num">${num(q.failed)}</td>
      <td class="num">${num(q.next_ready_age_s)} s</td></tr>`
    )
    .join("");
  // Drawn once, then refreshed in place: the charts keep their place while new ones load.
  if (!$("#overview")) {
    $("#view").innerHTML = `<div id="overview"><h1>Queues</h1><div id="overview-cards"></div>${chartsSection(null)}
      <div id="overview-cluster"></div><h2>Every queue, whatever protocol fills it</h2><div id="overview-queues"></div></div>`;
  }
  $("#overview-cards").innerHTML = `<div class="cards"><div class="card"><span class="muted">jobs</span><b id="total-jobs">${num(o.jobs)}</b></div>
    <div class="card"><span class="muted">queues</span><b>${num(o.queues.length)}</b></div>
    <div class="card"><span class="muted">created since start</span><b>${num(o.jobs_created)}</b></div></div>`;
  $("#overview-queues").innerHTML = `<table id="queues"><tr><th>queue</th><th class="num">ready</th><th class="num">reserved</th><th class="num">delayed</th>
    <th class="num">buried</th><th class="num">waiting</th><th class="num">created</th><th class="num">completed</th>
    <th class="num">failed</th><th class="num">next ready age</th></tr>${rows}</table>`;
  chartQueueChoices(o.queues.map((q) => q.name));
  await Promise.all([drawCluster(), drawCharts(overviewQueue)]);
}

async function queueView(name, state, after) {
  const page = await api(`/queues/${enc(name)}?state=${state}&limit=50${after ? "&after=" + enc(after) : ""}`);
  const o = await api("/overview");
  const q = o.queues.find((x) => x.name === name) || {};
  const tabs = ["ready", "reserved", "delayed", "buried"]
    .map((s) => `<a class="${s === state ? "on" : ""}" href="#/queue/${enc(name)}/${s}">${s} (${num(q[s])})</a>`)
    .join("");
  const rows = page.jobs
    .map(
      (j) => `<tr data-job="${j.id}"><td><a href="#/job/${j.id}">${j.id}</a></td><td class="num">${j.pri}</td>
      <td class="num">${num(j.age_s)} s</td><td class="num">${j.reserves}</td><td class="body">${esc(j.body_preview)}</td>
      <td>${jobButtons(j)}</td></tr>`
    )
    .join("");
  const more = page.next ? `<a id="next-page" href="#/queue/${enc(name)}/${state}/${enc(page.next)}">next page →</a>` : "";
  $("#view").innerHTML = `<h1>Queue ${esc(name)} ${q.paused ? '<span class="muted">(paused)</span>' : ""}</h1>
    <div class="bar">${
      q.paused
        ? `<button id="resume" onclick="act('/queues/${enc(name)}/resume')">Resume</button>`
        : `<button id="pause" onclick="act('/queues/${enc(name)}/pause')">Pause</button>`
    } <button onclick="act('/queues/${enc(name)}/kick?bound=100')">Kick 100</button></div>
    <div id="dead-letters"></div>${chartsSection(name)}
    <div class="tabs">${tabs}</div><h2></h2>
    <table id="jobs"><tr><th>id</th><th class="num">pri</th><th class="num">age</th><th class="num">reserves</th><th>body</th><th></th></tr>${rows ||
      '<tr><td colspan="6" class="muted">no jobs in this state</td></tr>'}</table><p>${more}</p><div id="queue-policy"></div>`;
  await Promise.all([drawQueuePolicy(name), drawCharts(name)]);
}

function jobButtons(j) {
  const b = [];
  if (j.state === "buried" || j.state === "delayed") b.push(`<button onclick="act('/jobs/${j.id}/kick')">kick</button>`);
  if (j.state === "ready" || j.state === "delayed") b.push(`<button onclick="act('/jobs/${j.id}/bury')">bury</button>`);
  if (j.state !== "reserved") b.push(`<button class="danger" onclick="act('/jobs/${j.id}/delete')">delete</button>`);
  return b.join(" ");
}

const when = (ms) => new Date(ms).toLocaleTimeString();
const took = (ms) => (ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + " s");

// Each lease of the job: when, who held it (a connection or worker session), how it ended.
function attemptsTable(j) {
  const rows = (j.attempts || []).map(
    (a, i) => `<tr data-attempt="${i}" data-ended="${esc(a.ended)}"><td>${when(a.started_ms)}</td>
      <td class="num">${took(a.ended_ms - a.started_ms)}</td><td>session ${a.holder}</td>
      <td class="ended-${esc(a.ended.replace(" ", "-"))}">${esc(a.ended)}</td><td class="body">${esc(a.error)}</td></tr>`
  );
  if (j.lease) {
    rows.push(`<tr data-attempt="running" data-ended="running"><td>${when(j.lease.started_ms)}</td>
      <td class="num">${took(Date.now() - j.lease.started_ms)}</td><td>session ${j.lease.holder}</td>
      <td>running</td><td></td></tr>`);
  }
  const body = rows.join("") || '<tr><td colspan="5" class="muted">never leased</td></tr>';
  return `<h2>Attempts <span class="muted">(the last ${16} kept)</span></h2>
    <table id="attempts"><tr><th>began</th><th class="num">lasted</th><th>held by</th><th>ended</th><th>error</th></tr>${body}</table>`;
}

async function jobView(id) {
  let j;
  try {
    j = await api(`/jobs/${enc(id)}`);
  } catch (e) {
    const ended = e.body && e.body.ended;
    $("#view").innerHTML = `<h1>Job ${esc(id)}</h1><p class="muted">${
      ended ? "It has ended; its last attempts:" : esc(e.message) + " — it may have finished long ago, or never existed."
    }</p>${ended ? attemptsTable(e.body) : ""}`;
    return;
  }
  const field = (k, v) => `<dt>${k}</dt><dd>${v}</dd>`;
  $("#view").innerHTML = `<h1>Job ${j.id}</h1><div class="bar">${jobButtons(j)}</div><div class="job-detail"><dl>
    ${field("queue", `<a href="#/queue/${enc(j.queue)}/${j.state}">${esc(j.queue)}</a>`)}
    ${field("state", esc(j.state))}${field("priority", j.pri)}${field("age", num(j.age_s) + " s")}
    ${field("time left", num(j.time_left_s) + " s")}${field("ttr", j.ttr + " s")}${field("durable", j.durable)}
    ${field("attempts (reserves)", j.reserves)}${field("lease timeouts", j.timeouts)}${field("releases", j.releases)}
    ${field("buries / kicks", j.buries + " / " + j.kicks)}${field("size", num(j.size) + " B")}
    ${j.attrs ? field("attributes", `<span class="body">${esc(j.attrs)}</span>`) : ""}
    ${field("body", `<span class="body">${esc(j.body_preview)}${j.size > 256 ? "…" : ""}</span>`)}</dl>
    <div>${attemptsTable(j)}</div></div>`;
}

async function connectionsView() {
  const o = await api("/overview");
  const rows = o.protocols
    .map(
      (p) => `<tr><td>${esc(p.name)}</td><td class="num">${num(p.connections)}</td><td class="num">${num(p.connections_total)}</td>
      <td class="num">${num(p.refused)}</td><td class="num">${num(p.jobs_created)}</td><td class="num">${num(p.jobs_completed)}</td>
      <td class="num">${num(p.jobs_failed)}</td></tr>`
    )
    .join("");
  const log = o.log
    ? `<h2>Log</h2><dl><dt>records</dt><dd>${num(o.log.records)}</dd><dt>bytes</dt><dd>${num(o.log.bytes)}</dd>
      <dt>writes (group commits)</dt><dd>${num(o.log.writes)}</dd><dt>fsyncs</dt><dd>${num(o.log.fsyncs)}</dd>
      <dt>segment</dt><dd>${o.log.segment}</dd></dl>`
    : "<p class=muted>memory only: no log</p>";
  $("#view").innerHTML = `<h1>Connections and workers per protocol</h1>
    <table id="protocols"><tr><th>protocol</th><th class="num">open</th><th class="num">since start</th><th class="num">refused</th>
    <th class="num">jobs created</th><th class="num">completed</th><th class="num">failed</th></tr>${rows}</table>${log}`;
}

async function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  clearTimeout(timer);
  try {
    if (parts[0] === "queue" && parts[1]) await queueView(parts[1], parts[2] || "ready", parts[3]);
    else if (parts[0] === "job" && parts[1]) await jobView(parts[1]);
    else if (parts[0] === "connections") await connectionsView();
    else if (parts[0] === "workers") await workersView(parts[1]);
    else if (parts[0] === "jobd") await jobdView(parts[1]);
    else if (parts[0] === "schedules") await schedulesView();
    else await queuesView();
  } catch (e) {
    $("#view").innerHTML = `<p class="muted">${esc(e.message)}</p>`;
    // A queue with no jobs that nobody uses is dropped (as beanstalkd drops a tube) until
    // its next job: its page keeps looking rather than stay on "not found".
    if (parts[0] === "queue") timer = setTimeout(route, REFRESH_MS);
  }
  // Live counts: the overview and connections refresh themselves; listings do on demand.
  if (!parts[0] || ["connections", "workers", "jobd", "schedules"].includes(parts[0])) timer = setTimeout(route, REFRESH_MS);
}

// A read-only token sees no action buttons (the server would refuse them anyway).
async function whoami() {
  try {
    const me = await api("/whoami");
    if (me.role === "read") {
      document.body.classList.add("read-only");
      $("#role").textContent = "read-only";
    }
  } catch (e) {
    // The views say what is wrong; the buttons stay.
  }
}

// The header's search: a job by its id, from every page.
function findJob(event) {
  event.preventDefault();
  const id = $("#find-job").value.trim();
  if (!/^[0-9]+$/.test(id)) return toast("a job id is a number", true);
  if (location.hash === "#/job/" + id) route();
  else location.hash = "#/job/" + id;
}

window.act = act;
$("#find").addEventListener("submit", findJob);
window.addEventListener("hashchange", route);
whoami().then(route);
