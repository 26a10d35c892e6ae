// graphile-worker, the peer jobyard on PostgreSQL is measured beside (bench/pg/run.py).
//
//   node graphile.mjs drain   --url URL --jobs N --mode defaults|c24|perf
//   node graphile.mjs latency --url URL --rate R --seconds S [--warmup W] [--mode defaults]
//   node graphile.mjs produce --url URL --rate R --seconds S --warmup W   (latency's producer)
//
// Each prints one JSON line. The password comes from PGPASSWORD (node-postgres reads it).
// Modes: `defaults` is graphile-worker with nothing set (1 concurrent job); `c24` sets 24
// concurrent jobs (and a pool of 25, as its warning about a smaller pool asks); `perf` is the configuration of its documented performance figures
// (https://worker.graphile.org/docs/performance: 24 concurrent jobs, a pool of 25, a local
// queue of 500, batched completion and failure with a 0 ms delay). Its logger is quietened
// to warnings in every mode, so its per-job log lines cost it nothing here.

import { spawn } from "node:child_process";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Logger, makeWorkerUtils, run } from "graphile-worker";

const args = parseArgs(process.argv.slice(2));
const quiet = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`graphile-worker ${level}: ${message}`);
});

function parseArgs(argv) {
  const out = { cmd: argv[0] };
  for (let i = 1; i < argv.length; i += 2) out[argv[i].replace(/^--/, "")] = argv[i + 1];
  return out;
}

/** Wall-clock milliseconds with sub-millisecond precision, comparable across processes. */
function nowMs() {
  return performance.timeOrigin + performance.now();
}

function workerOptions(mode) {
  const base = { connectionString: args.url, logger: quiet, noHandleSignals: true };
  switch (mode) {
    case "defaults":
      return base;
    case "c24":
      return { ...base, concurrency: 24, maxPoolSize: 25 };
    case "perf":
      return {
        ...base,
        concurrency: 24,
        maxPoolSize: 25,
        preset: {
          worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 },
        },
      };
    default:
      throw new Error(`unknown mode ${mode}`);
  }
}

function quantile(sorted, q) {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

function cpuSeconds() {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

/** Queues N jobs (not measured), runs a worker until it has executed all of them. */
async function drain() {
  const n = Number(args.jobs ?? 50000);
  const utils = await makeWorkerUtils({ connectionString: args.url, logger: quiet });
  await utils.migrate();
  await utils.withPgClient((c) => c.query("DELETE FROM graphile_worker._private_jobs"));
  for (let done = 0; done < n; done += 1000) {
    const batch = [];
    for (let i = done; i < Math.min(n, done + 1000); i++) {
      batch.push({ identifier: "bench", payload: { i, pad: "x".repeat(80) } });
    }
    await utils.addJobs(batch);
  }
  let executed = 0;
  let finished;
  const allDone = new Promise((resolve) => (finished = resolve));
  const cpu0 = cpuSeconds();
  const t0 = nowMs();
  const runner = await run({
    ...workerOptions(args.mode),
    taskList: {
      bench: async () => {
        if (++executed === n) finished(nowMs());
      },
    },
  });
  const tLast = await allDone;
  // Executed is not yet completed (completion may be batched): the drain ends when the
  // table is empty, as jobyard's ends with the last DELETED.
  const watcher = await utils.withPgClient(async (c) => {
    for (;;) {
      const r = await c.query("SELECT count(*)::int AS n FROM graphile_worker._private_jobs");
      if (r.rows[0].n === 0) return nowMs();
      await new Promise((res) => setTimeout(res, 2));
    }
  });
  await runner.stop();
  const tStopped = nowMs();
  const cpu = cpuSeconds() - cpu0;
  const left = await utils.withPgClient((c) =>
    c.query("SELECT count(*)::int AS n FROM graphile_worker._private_jobs"),
  );
  await utils.release();
  const seconds = (watcher - t0) / 1000;
  console.log(
    JSON.stringify({
      peer: "graphile-worker",
      workload: "drain",
      mode: args.mode,
      jobs: n,
      seconds,
      jobs_per_s: n / seconds,
      seconds_to_last_executed: (tLast - t0) / 1000,
      seconds_to_stopped: (tStopped - t0) / 1000,
      jobs_left_after_stop: left.rows[0].n,
      node_cpu_s: cpu,
      node_cpu_us_per_job: (cpu * 1e6) / n,
    }),
  );
}

/** Adds jobs at a fixed rate (open loop); the first --warmup seconds are marked unmeasured. */
async function produce() {
  const rate = Number(args.rate);
  const seconds = Number(args.seconds);
  const warmup = Number(args.warmup ?? 1);
  const utils = await makeWorkerUtils({ connectionString: args.url, logger: quiet });
  const interval = 1000 / rate;
  const start = nowMs() + 50;
  const end = start + (warmup + seconds) * 1000;
  let next = start;
  let measured = 0;
  const inflight = new Set();
  while (next < end) {
    const wait = next - nowMs();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const m = next >= start + warmup * 1000;
    if (m) measured++;
    const p = utils.addJob("bench", { t: nowMs(), m, pad: "x".repeat(40) });
    inflight.add(p);
    p.finally(() => inflight.delete(p));
    next += interval;
  }
  await Promise.all(inflight);
  await utils.release();
  console.log(JSON.stringify({ measured }));
}

/** A worker in this process, a producer in a child; latency is add → task start. */
async function latency() {
  const utils = await makeWorkerUtils({ connectionString: args.url, logger: quiet });
  await utils.migrate();
  await utils.withPgClient((c) => c.query("DELETE FROM graphile_worker._private_jobs"));
  await utils.release();
  const samples = [];
  let expected = Infinity;
  let finished;
  const allDone = new Promise((resolve) => (finished = resolve));
  const cpu0 = cpuSeconds();
  const runner = await run({
    ...workerOptions(args.mode ?? "defaults"),
    taskList: {
      bench: async (payload) => {
        const lat = nowMs() - payload.t;
        if (payload.m) {
          samples.push(lat);
          if (samples.length >= expected) finished();
        }
      },
    },
  });
  const child = spawn(
    process.execPath,
    [fileURLToPath(import.meta.url), "produce", "--url", args.url, "--rate", args.rate,
      "--seconds", args.seconds, "--warmup", args.warmup ?? "1"],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const lines = createInterface({ input: child.stdout });
  for await (const line of lines) {
    expected = JSON.parse(line).measured;
    if (samples.length >= expected) finished();
  }
  const timeout = setTimeout(() => finished(), 10000);
  await allDone;
  clearTimeout(timeout);
  await runner.stop();
  const cpu = cpuSeconds() - cpu0;
  samples.sort((a, b) => a - b);
  console.log(
    JSON.stringify({
      peer: "graphile-worker",
      workload: "latency",
      mode: args.mode ?? "defaults",
      rate: Number(args.rate),
      jobs: samples.length,
      expected,
      lat_p50_us: quantile(samples, 0.5) * 1000,
      lat_p99_us: quantile(samples, 0.99) * 1000,
      lat_max_us: (samples[samples.length - 1] ?? 0) * 1000,
      worker_cpu_s: cpu,
    }),
  );
}

const commands = { drain, produce, latency };
if (!commands[args.cmd]) {
  console.error("usage: node graphile.mjs drain|latency|produce --url URL ...");
  process.exit(2);
}
await commands[args.cmd]();
process.exit(0);
