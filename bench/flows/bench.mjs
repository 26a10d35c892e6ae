// The flow workload of issue 12, through the Node client (@jobyard/queues) against a
// running jobyard: a 3-stage linear flow, and a 3-stage flow whose middle stage fans out
// to 3 children; 4 workers per stage (and per child stage), trivial handlers.
//
//   node bench/flows/bench.mjs --url http://127.0.0.1:8080 --pid <server pid> [--seconds 5]
//        [--rate 10] [--fixed-seconds 30] [--only linear|fanout|ceiling] [--ceiling off]
//        [--modes saturated,fixed] [--warmup-seconds 120] [--helper-threads idle]
//        [--ceiling-kinds "undici Pool,client transport"]
//
// Reports, per shape: flows done per second at saturation (creators keep `inflight` flows
// open), create→done latency p50/p99 at a fixed `rate` of creations per second, and the
// server's CPU per flow (from /proc/<pid>/stat) during the saturated run, this Node
// process's CPU per flow, and HTTP requests per flow (the server's request counters).
// "Done" is when the last stage's complete was acknowledged (seen through the worker's
// debug log).
//
// `--helper-threads idle` first puts every thread of this process but the main one (V8's
// compiler and GC helpers, libuv's pool) at SCHED_IDLE with chrt, so that they never keep
// the main thread waiting for a CPU: it measures how much of the client's tail is the
// kernel running V8's background compiles ahead of the main thread (docs/benchmarks.md).
//
// The fixed-rate run first runs `warmup-seconds` at the same rate on the same workers and
// reports that part apart (`cold_*`): at 10 requests/s V8 keeps compiling the client's
// and Node's code for about two minutes after a process starts, a function at a time as
// each gets hot (docs/benchmarks.md, "Flows"), and a worker service runs for much longer
// than that. The measured part is the steady state after it.
//
// Then the ceiling: how many small JSON requests per second this Node process can make at
// all against the same server (16 loops, each leasing with no wait from an empty stage on
// a session of its own: a request and reply of a flow worker's size), through the
// client's own transport (what it uses for http: URLs), through node:http with a
// keep-alive agent (what it uses for https:), through fetch, and through undici's `Pool`
// (the npm package, this bench's devDependency: `npm install` in bench/flows; skipped when
// absent), the HTTP/1.1 client the client's own transport would otherwise be. Divided by
// the requests a flow takes, it bounds the flows/s any client in one Node process can reach.
// Prints one JSON object per measurement.

import http from "node:http";
import { readFileSync, readdirSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { QueuesClient } from "../../clients/node/src/index.js";
import { HttpTransport } from "../../clients/node/src/transport.js";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const url = args.url ?? "http://127.0.0.1:8080";
const pid = args.pid;
const seconds = Number(args.seconds ?? 5);
const rate = Number(args.rate ?? 10);
// The fixed-rate run is longer: its p99 needs a few hundred flows to mean anything.
const fixedSeconds = Number(args["fixed-seconds"] ?? seconds);
const inflight = Number(args.inflight ?? 64);
const workersPerStage = Number(args.workers ?? 4);
const only = args.only;
// `--modes fixed` runs only the fixed-rate measurements (A/B runs of the latency).
const modes = (args.modes ?? "saturated,fixed").split(",");
const withCeiling = args.ceiling !== "off";
const warmupSeconds = Number(args["warmup-seconds"] ?? 120);
const helperThreads = args["helper-threads"] ?? "default";
if (helperThreads === "idle") {
  for (const tid of readdirSync("/proc/self/task")) {
    if (Number(tid) === process.pid) continue;
    const r = spawnSync("chrt", ["--idle", "-p", "0", tid]);
    if (r.status !== 0) throw new Error(`chrt --idle -p 0 ${tid} failed: ${r.stderr}`);
  }
} else if (helperThreads !== "default") {
  throw new Error(`--helper-threads takes "idle", got ${helperThreads}`);
}

const ticks = () => {
  if (!pid) return 0;
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return Number(f[11]) + Number(f[12]); // utime + stime, in clock ticks (100/s)
};

/** HTTP requests the server has counted so far (its `/metrics`), or null.
 *
 * Read by a `curl` child, not from this process: a request of another kind from here (fetch,
 * or the client's transport asking for a large text reply) made between the warm-up and
 * the measured part deoptimized Node's socket read and write paths, and V8 spent the next
 * minute of the measurement recompiling them on the same two CPUs (docs/benchmarks.md). */
function requestsServed() {
  const r = spawnSync("curl", ["-sf", `${url}/metrics`], { encoding: "utf8" });
  if (r.status !== 0) return null;
  let sum = 0;
  for (const line of r.stdout.split("\n")) {
    if (line.startsWith("jobyard_commands_total{") && line.includes('protocol="http"')) {
      sum += Number(line.slice(line.lastIndexOf(" ") + 1));
    }
  }
  return sum;
}

const shapes = {
  linear: {
    definition: (n) => ({ name: n, stages: [{ name: `${n}-a`, next: `${n}-b` }, { name: `${n}-b`, next: `${n}-c` }, { name: `${n}-c` }] }),
    handlers: (n) => [[`${n}-a`, async () => ({ a: 1 })], [`${n}-b`, async () => ({ b: 1 })], [`${n}-c`, async () => ({ c: 1 })]],
    last: (n) => `${n}-c`,
  },
  fanout: {
    definition: (n) => ({
      name: n,
      stages: [
        { name: `${n}-a`, next: `${n}-fan` },
        { name: `${n}-fan`, next: `${n}-c`, children: [{ name: "child" }] },
        { name: `${n}-c` },
      ],
    }),
    handlers: (n) => [
      [`${n}-a`, async () => ({ [`children:${n}-fan:params`]: [{ childName: "child" }, { childName: "child" }, { childName: "child" }] })],
      [`${n}-fan:child`, async () => ({ done: true })],
      [`${n}-c`, async () => ({ c: 1 })],
    ],
    last: (n) => `${n}-c`,
  },
};

function percentile(sorted, p) {
  if (!sorted.length) return null;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function run(shape, name, mode) {
  const spec = shapes[shape];
  const doneAt = new Map();
  let waiting = new Map();
  const logger = {
    debug(message, meta) {
      if (meta?.queueName === spec.last(name) && message.startsWith("job complete")) {
        const t = performance.now();
        doneAt.set(meta.jobId, t);
        waiting.get(meta.jobId)?.(t);
      }
    },
    verbose() {}, info() {}, warn() {}, error: (m) => console.error(m),
  };
  const client = new QueuesClient({ url, logger, declarePresets: false, flows: [spec.definition(name)] });
  // Per flow id: when each stage's handler first saw it (the fan-out's middle stage is its
  // children, whose ids are their own: not stamped).
  const seen = new Map();
  const see = (i, id) => {
    const s = seen.get(id) ?? [];
    s[i] ??= performance.now();
    seen.set(id, s);
  };
  spec.handlers(name).forEach(([stage, fn], i) => {
    const stamped = async (job) => {
      see(i, job.id);
      return fn(job);
    };
    client.createWorkers(name, stage, stamped, workersPerStage, 30, 1);
  });
  await client.startAll();
  const created = new Map();
  const answered = new Map();
  const create = async () => {
    const t = performance.now();
    const id = await client.createJob(name, { priority: 1 });
    created.set(id, t);
    answered.set(id, performance.now());
    return new Promise((resolve) => {
      if (doneAt.has(id)) return resolve();
      waiting.set(id, () => resolve());
    });
  };
  const total = (secs) => Math.max(1, Math.round(rate * secs));
  /** Creates flows at `rate` for `secs`; resolves when all are done. */
  const paced = async (secs) => {
    const start = performance.now();
    const pending = [];
    for (let i = 0; i < total(secs); i++) {
      const due = start + (i * 1000) / rate;
      const wait = due - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      pending.push(create());
    }
    await Promise.all(pending);
  };
  let cold = {};
  if (mode === "fixed" && warmupSeconds > 0) {
    await paced(warmupSeconds);
    const lat = latencies(created, doneAt);
    cold = { cold_seconds: warmupSeconds, cold_flows: lat.length, cold_p50_ms: +percentile(lat, 50)?.toFixed(2), cold_p99_ms: +percentile(lat, 99)?.toFixed(2) };
    for (const m of [created, answered, seen, doneAt]) m.clear();
  }
  const served0 = requestsServed();
  const cpu0 = ticks();
  const own0 = process.cpuUsage();
  const t0 = performance.now();
  let count = 0;
  if (mode === "saturated") {
    const deadline = t0 + seconds * 1000;
    await Promise.all(Array.from({ length: inflight }, async () => {
      while (performance.now() < deadline) {
        await create();
        count++;
      }
    }));
  } else {
    await paced(fixedSeconds);
    count = created.size;
  }
  const elapsed = (performance.now() - t0) / 1000;
  const cpu = (ticks() - cpu0) / 100;
  const own = process.cpuUsage(own0);
  const served = requestsServed();
  await client.stopAll();
  const lat = latencies(created, doneAt);
  return {
    shape, mode, client: "node", helper_threads: helperThreads, workers_per_stage: workersPerStage, flows: count,
    seconds: +elapsed.toFixed(2), flows_per_s: +(count / elapsed).toFixed(1),
    p50_ms: +percentile(lat, 50)?.toFixed(2), p99_ms: +percentile(lat, 99)?.toFixed(2),
    server_cpu_ms_per_flow: pid ? +((cpu * 1000) / count).toFixed(3) : null,
    node_cpu_ms_per_flow: +((own.user + own.system) / 1000 / count).toFixed(3),
    // The metrics read itself is one of them.
    requests_per_flow: served0 === null ? null : +((served - served0 - 1) / count).toFixed(2),
    ...cold,
    ...(mode === "fixed" ? { hops_p50_ms: hops(created, answered, seen, doneAt, spec.handlers(name).length) } : {}),
  };
}

/** Create→done of every flow created, in ms, sorted. */
function latencies(created, doneAt) {
  return [...created].map(([id, t]) => doneAt.get(id) - t).filter((x) => x >= 0).sort((a, b) => a - b);
}

/** Medians of each hop of create→done, in ms, over the flows stamped at every point:
 * `create` (sent → answered), `to_stage1` (sent → first handler), stage to stage, and
 * `last_to_done` (last handler → its complete acknowledged, the Node bench's "done"). */
function hops(created, answered, seen, doneAt, stages) {
  const gaps = {};
  const add = (k, v) => (gaps[k] ??= []).push(v);
  for (const [id, sent] of created) {
    const s = seen.get(id) ?? [];
    const last = s[stages - 1];
    if (!answered.has(id) || s[0] === undefined || last === undefined || !doneAt.has(id)) continue;
    add("create", answered.get(id) - sent);
    add("to_stage1", s[0] - sent);
    for (let i = 1; i < stages; i++) if (s[i] !== undefined && s[i - 1] !== undefined) add(`stage${i}_to_${i + 1}`, s[i] - s[i - 1]);
    add("stage1_to_last", last - s[0]);
    add("last_to_done", doneAt.get(id) - last);
  }
  const out = {};
  for (const [k, v] of Object.entries(gaps)) out[k] = +percentile(v.sort((a, b) => a - b), 50).toFixed(3);
  return out;
}

/** One POST with a small JSON body through node:http and a keep-alive agent. */
function postWithAgent(agent, path, body) {
  const payload = JSON.stringify(body);
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { hostname, port, path, method: "POST", agent,
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(payload) } },
      (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => resolve(JSON.parse(Buffer.concat(chunks).toString())));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(payload);
  });
}

/** The same through fetch (Node's undici). */
async function postWithFetch(path, body) {
  const r = await fetch(url + path, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
  });
  return r.json();
}

/** The same through undici's `Pool` and its `request` (a connection per loop at most). */
function postWithUndici(pool) {
  return async (path, body) => {
    const reply = await pool.request({
      path, method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
    });
    return reply.body.json();
  };
}

/** undici's module, or null when the bench's devDependencies are not installed. */
async function loadUndici() {
  try {
    return await import("undici");
  } catch {
    console.error("undici is not installed (npm install in bench/flows): its ceiling is skipped");
    return null;
  }
}

/** Requests per second one Node process makes against this server, and its CPU per request. */
async function ceiling(kind, undici) {
  const stage = `bench-ceiling-${stamp}`;
  await postWithFetch("/v1/flows", { name: stage, stages: [{ name: stage }] });
  const loops = 16;
  const agent = new http.Agent({ keepAlive: true });
  const { hostname, port, host } = new URL(url);
  const lean = new HttpTransport(hostname, port, host);
  const pool = undici ? new undici.Pool(url, { connections: loops }) : null;
  const postLean = async (path, body) => JSON.parse((await lean.request("POST", path, JSON.stringify(body))).text);
  const post = {
    "fetch": postWithFetch,
    "client transport": postLean,
    "node:http": (path, body) => postWithAgent(agent, path, body),
    "undici Pool": pool && postWithUndici(pool),
  }[kind];
  const sessions = [];
  for (let i = 0; i < loops; i++) sessions.push((await post("/v1/workers", {})).worker);
  const path = `/v1/stages/${stage}/lease`;
  const cpu0 = ticks();
  const own0 = process.cpuUsage();
  const t0 = performance.now();
  const deadline = t0 + seconds * 1000;
  let count = 0;
  await Promise.all(sessions.map(async (worker) => {
    while (performance.now() < deadline) {
      await post(path, { worker, wait_ms: 0 });
      count++;
    }
  }));
  const elapsed = (performance.now() - t0) / 1000;
  const cpu = (ticks() - cpu0) / 100;
  const own = process.cpuUsage(own0);
  agent.destroy();
  lean.close();
  await pool?.close();
  return {
    shape: "ceiling", mode: kind, client: "node", loops, requests: count,
    seconds: +elapsed.toFixed(2), requests_per_s: +(count / elapsed).toFixed(0),
    node_cpu_ms_per_request: +((own.user + own.system) / 1000 / count).toFixed(4),
    server_cpu_ms_per_request: pid ? +((cpu * 1000) / count).toFixed(4) : null,
  };
}

const stamp = Date.now().toString(36);
for (const shape of Object.keys(shapes)) {
  if (only && only !== shape) continue;
  for (const mode of modes) {
    console.log(JSON.stringify(await run(shape, `bench-${shape}-${mode}-${stamp}`, mode)));
  }
}
if (withCeiling && (!only || only === "ceiling")) {
  const undici = await loadUndici();
  // `--ceiling-kinds a,b` measures those, in that order (to check the order does not decide).
  const all = ["client transport", "node:http", "fetch", ...(undici ? ["undici Pool"] : [])];
  const kinds = args["ceiling-kinds"]?.split(",") ?? all;
  for (const kind of kinds) {
    if (!all.includes(kind)) throw new Error(`--ceiling-kinds: unknown ${kind}; known: ${all.join(", ")}`);
  }
  for (const kind of kinds) console.log(JSON.stringify(await ceiling(kind, undici)));
}
