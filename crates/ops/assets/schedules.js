// The dashboard's #/schedules view: every periodic job's schedule with its next tick, fed
// by the HTTP API's /v1/schedules (docs/schedules.md), with pause and resume.
"use strict";

async function schedulesApi(path, method = "GET") {
  const res = await fetch(location.origin + "/v1/schedules" + path, { method, credentials: "same-origin" });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error ? body.error.message : res.status + " " + res.statusText);
  return body;
}

// Pauses or resumes a schedule, then redraws.
async function scheduleAct(name, action) {
  try {
    await schedulesApi("/" + encodeURIComponent(name) + "/" + action, "POST");
    toast("Done: " + action + " " + name);
    route();
  } catch (e) {
    toast(e.message, true);
  }
}

function scheduleTiming(s) {
  return s.interval ? "every " + s.interval : "cron " + s.cron + " (" + s.time_zone + ")";
}

async function schedulesView() {
  const { schedules } = await schedulesApi("");
  const rows = schedules
    .map((s) => {
      const name = esc(JSON.stringify(s.name));
      const button = s.paused
        ? `<button onclick="scheduleAct(${name}, 'resume')">resume</button>`
        : `<button onclick="scheduleAct(${name}, 'pause')">pause</button>`;
      const next = s.next_tick_ms == null ? '<span class="muted">paused</span>' : new Date(s.next_tick_ms).toLocaleString();
      const last = s.last_job ? `<a href="#/job/${s.last_job}">${s.last_job}</a>` : "";
      return `<tr data-schedule="${esc(s.name)}"><td>${esc(s.name)}</td>
        <td><a href="#/queue/${enc(s.queue)}/ready">${esc(s.queue)}</a></td><td>${esc(scheduleTiming(s))}</td>
        <td>${esc(s.overlap)} / ${esc(s.missed)}</td><td>${next}</td><td>${last}</td><td>${button}</td></tr>`;
    })
    .join("");
  $("#view").innerHTML = `<h1>Schedules</h1>
    <table id="schedules"><tr><th>schedule</th><th>queue</th><th>timing</th><th>overlap / missed</th>
    <th>next run</th><th>last job</th><th></th></tr>${rows ||
      '<tr><td colspan="7" class="muted">no schedules: declare them in the config file, the HTTP API or jobyard ctl</td></tr>'}</table>`;
}

window.scheduleAct = scheduleAct;
