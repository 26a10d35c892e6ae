// The flow workload of issue 12, through the Node client (@jobyard/queues) against a
// running jobyard: a 3-stage linear flow, and a 3-stage flow whose middle stage fans out
// to 3 children; 4 workers per stage (and per child stage), trivial handlers.
//
//   node bench/flows/bench.mjs --url http://127.0.0.1:8080 --pid <server pid> [--seconds 5] [--rate 10]
//
// Reports, per shape: flows done per second at saturation (creators keep `inflight` flows
// open), create→done latency p50/p99 at a fixed `rate` of creations per second, and the
// server's CPU per flow (from /proc/<pid>/stat) during the saturated run. "Done" is when
// the last stage's complete was acknowledged (seen through the worker's debug log).
// Prints one JSON object per measurement.

import { readFileSync } from "node:fs";
import { QueuesClient } from "../../clients/node/src/index.js";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const url = args.url ?? "http://127.0.0.1:8080";
const pid = args.pid;
const seconds = Number(args.seconds ?? 5);
const rate = Number(args.rate ?? 10);
const inflight = Number(args.inflight ?? 64);
const workersPerStage = Number(args.workers ?? 4);
const only = args.only;

const ticks = () => {
  if (!pid) return 0;
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return Number(f[11]) + Number(f[12]); // utime + stime, in clock ticks (100/s)
};

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
  for (const [stage, fn] of spec.handlers(name)) client.createWorkers(name, stage, fn, workersPerStage, 30, 1);
  await client.startAll();
  const created = new Map();
  const create = async () => {
    const t = performance.now();
    const id = await client.createJob(name, { priority: 1 });
    created.set(id, t);
    return new Promise((resolve) => {
      if (doneAt.has(id)) return resolve();
      waiting.set(id, () => resolve());
    });
  };
  const cpu0 = ticks();
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
    const total = Math.max(1, Math.round(rate * seconds));
    const pending = [];
    for (let i = 0; i < total; i++) {
      const due = t0 + (i * 1000) / rate;
      const wait = due - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      pending.push(create().then(() => count++));
    }
    await Promise.all(pending);
  }
  const elapsed = (performance.now() - t0) / 1000;
  const cpu = (ticks() - cpu0) / 100;
  await client.stopAll();
  const lat = [...created].map(([id, t]) => doneAt.get(id) - t).filter((x) => x >= 0).sort((a, b) => a - b);
  return {
    shape, mode, client: "node", workers_per_stage: workersPerStage, flows: count,
    seconds: +elapsed.toFixed(2), flows_per_s: +(count / elapsed).toFixed(1),
    p50_ms: +percentile(lat, 50)?.toFixed(2), p99_ms: +percentile(lat, 99)?.toFixed(2),
    server_cpu_ms_per_flow: pid ? +((cpu * 1000) / count).toFixed(3) : null,
  };
}

const stamp = Date.now().toString(36);
for (const shape of Object.keys(shapes)) {
  if (only && only !== shape) continue;
  for (const mode of ["saturated", "fixed"]) {
    console.log(JSON.stringify(await run(shape, `bench-${shape}-${mode}-${stamp}`, mode)));
  }
}
