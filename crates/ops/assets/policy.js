// A queue page's policy and dead letters (docs/retries.md), read from the HTTP API:
// GET /v1/queues/Q/policy (lease limit, pause, rate limit and its waiting takers, the retry
// policy) and GET /v1/queues/Q/dead-letters (each with its failures). The dead letters'
// buttons call the same API's bulk routes, retry or discard, for all or one; the listener
// guards them as every action (an admin token, same-origin requests only).
"use strict";

async function queueApi(path, method = "GET", body) {
  const init = { method, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers = { "content-type": "application/json" };
    init.body = JSON.stringify(body);
  }
  const res = await fetch(location.origin + "/v1/queues/" + path, init);
  const reply = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(reply.error ? reply.error.message : res.status + " " + res.statusText);
  return reply;
}

function policyFields(p) {
  const field = (k, v, key) => `<dt>${k}</dt><dd data-policy="${key}">${v}</dd>`;
  const pause = p.paused
    ? p.paused_until_ms ? "until " + new Date(p.paused_until_ms).toLocaleString() : "until resumed"
    : "no";
  const rate = p.rate_limit
    ? `${esc(p.rate_limit)} <span class="muted">(${num(p.rate_tokens)} tokens now)</span>`
    : '<span class="muted">none</span>';
  const r = p.retry;
  const retry = r
    ? [
        field("max attempts", num(r.max_attempts), "max_attempts"),
        field("backoff", `${esc(r.backoff)} ${num(r.backoff_ms)} ms${r.backoff_max_ms ? ", at most " + num(r.backoff_max_ms) + " ms" : ""}`, "backoff"),
        field("after the last attempt", r.dead_letter
          ? `dead letter in <a href="#/queue/${enc(r.dead_letter)}/buried">${esc(r.dead_letter)}</a>`
          : "buried in this queue", "dead_letter"),
      ].join("")
    : field("retries", '<span class="muted">none: a failure ends the job</span>', "retry");
  return field("lease limit", p.lease_limit ? num(p.lease_limit) : '<span class="muted">none</span>', "lease_limit") +
    field("paused", pause, "paused") + field("rate limit", rate, "rate_limit") +
    field("waiting takers", num(p.waiting_workers), "waiting_workers") + retry;
}

function failureRows(d) {
  return (d.failures || [])
    .map((f, i) => `<div class="failure" data-failure="${i}">${when(f.at_ms)} · session ${f.holder} · ${esc(f.how)}${
      f.error == null ? "" : ": " + esc(f.error)}</div>`)
    .join("");
}

function deadLetterRows(name, letters) {
  const q = esc(JSON.stringify(name));
  return letters
    .map((d) => `<tr data-dead-letter="${d.id}"><td><a href="#/job/${d.id}">${d.id}</a></td>
      <td><a href="#/queue/${enc(d.origin)}/ready">${esc(d.origin)}</a></td><td class="num">${num(d.failed_attempts)}</td>
      <td class="body">${failureRows(d)}</td>
      <td><button class="retry-one" onclick="deadLetterAct(${q}, 'retry', [${d.id}])">retry</button>
      <button class="danger discard-one" onclick="deadLetterAct(${q}, 'discard', [${d.id}])">discard</button></td></tr>`)
    .join("");
}

// Fills a queue page's #queue-policy and #dead-letters (the latter only when it has any).
async function drawQueuePolicy(name) {
  const [p, dl] = await Promise.all([queueApi(enc(name) + "/policy"), queueApi(enc(name) + "/dead-letters")]);
  const box = $("#queue-policy");
  if (!box) return; // the page moved on meanwhile
  box.innerHTML = `<h2>Policy</h2><dl id="policy">${policyFields(p)}</dl>`;
  const letters = dl.dead_letters || [];
  if (!letters.length) {
    $("#dead-letters").innerHTML = "";
    return;
  }
  const q = esc(JSON.stringify(name));
  $("#dead-letters").innerHTML = `<h2>Dead letters (${num(letters.length)})</h2>
    <div class="bar"><button id="retry-all" onclick="deadLetterAct(${q}, 'retry')">Retry all</button>
    <button id="discard-all" class="danger" onclick="deadLetterAct(${q}, 'discard')">Discard all</button></div>
    <table id="dead-letter-list"><tr><th>id</th><th>failed in</th><th class="num">failed attempts</th><th>failures</th><th></th></tr>
    ${deadLetterRows(name, letters)}</table>`;
}

// Retries (back to the queue they failed in, with no failures counted) or discards dead
// letters: those of `ids`, or all of the queue's.
async function deadLetterAct(name, action, ids) {
  if (action === "discard" && !ids && !confirm(`Discard every dead letter of ${name}?`)) return;
  try {
    const done = await queueApi(enc(name) + "/dead-letters/" + action, "POST", ids ? { ids } : {});
    toast(`Done: ${action} ${done.count} dead letter${done.count === 1 ? "" : "s"}`);
    route();
  } catch (e) {
    toast(e.message, true);
  }
}

window.deadLetterAct = deadLetterAct;
