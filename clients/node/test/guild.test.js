// Guild Queues users' code, run against the real server through this package.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { AsyncLocalStorage } from "node:async_hooks";

import {
  QueuesClient, DelayError, FlowMonitor, createAccessFlow, Queue, presets,
} from "../src/index.js";
import { startServer, eventually } from "./server.js";

let server;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server?.stop();
});

const job = async (client, id) => (await client.getJobs([id], false))[0];

test("connect declares Guild's four flows, once", async () => {
  const client = new QueuesClient({ url: server.url });
  await client.connect();
  const { flows } = await client.api.get("/v1/flows");
  const names = flows.map((f) => f.name).sort();
  for (const name of Object.keys(presets())) assert.ok(names.includes(name), name);
  const access = flows.find((f) => f.name === "access");
  assert.deepEqual(access.stages.map((s) => s.name), presets().access.stages.map((s) => s.name));
});

test("a messaging job runs through its worker and is done", async () => {
  const client = new QueuesClient({ url: server.url });
  const seen = [];
  client.createWorkers("messaging", "send-message", async (input) => {
    seen.push(input);
    return { done: true, sentTo: input.recipients.length };
  }, 2, 10, 0.2);
  await client.startAll();
  const id = await client.createJob("messaging", {
    priority: 1, protocol: "XMTP", messageId: 7, guildId: 99, senderUserId: 1,
    notification: { title: "hi" }, recipients: ["a", "b"], correlationId: "corr-1",
  });
  assert.match(id, /^messaging:[0-9a-f-]{36}$/);
  const done = await eventually(async () => {
    const j = await job(client, id);
    return j?.done === true && j;
  }, "the job to be done");
  await client.stopAll();
  assert.equal(done.sentTo, 2);
  assert.equal(done["completed-queue"], "send-message");
  assert.equal(seen.length, 1);
  const input = seen[0];
  assert.equal(input.id, id);
  assert.equal(input.retries, 0);
  assert.equal(input.flowName, "messaging");
  assert.equal(input.priority, 1);
  assert.equal(input.correlationId, "corr-1");
  assert.deepEqual(input.recipients, ["a", "b"]);
  assert.equal(input.senderUserId, 1);
  const byKey = await client.getJobsByKey("messaging", "guildId", 99, false);
  assert.ok(byKey.some((j) => j.id === id));
});

test("access: fan-out to child workers, joined by the server, with children resolved", async () => {
  const client = new QueuesClient({ url: server.url });
  client.createWorkers("access", "access-preparation", async () => ({
    nextQueue: "access-check",
    "children:access-check:params": [
      { childName: "requirement", requirementId: 1 },
      { childName: "guild", requirementId: 2 },
    ],
  }), 1, 10, 0.2);
  client.createParentWorkers("access", "access-check", 1);
  client.createChildWorkers("access", "access-check", "requirement", async (input) =>
    ({ done: true, access: input.requirementId === 1 }), 2, 10, 0.2);
  client.createChildWorkers("access", "access-check", "guild", async () => ({ done: true, access: false }), 1, 10, 0.2);
  let logicInput;
  client.createWorkers("access", "access-logic", async (input) => {
    logicInput = input;
    return { nextQueue: "access-result", roleAccesses: [{ roleId: 5, access: true }] };
  }, 1, 10, 0.2);
  client.createWorkers("access", "access-result", async () => ({ done: true }), 1, 10, 0.2);
  await client.startAll();
  const id = await client.createJob("access", {
    priority: 1, userId: 4242, guildId: 1, roleIds: [5, 6], recheckAccess: false,
  });
  const done = await eventually(async () => {
    const j = await job(client, id);
    return j?.done === true && j;
  }, "the access flow to finish");
  await client.stopAll();
  assert.equal(done.failed, undefined);
  assert.equal(done["completed-queue"], "access-result");
  assert.equal(logicInput["children:access-check:jobs"].length, 2);
  const [resolved] = await client.getJobsByKey("access", "roleIds", 6, true);
  assert.equal(resolved.id, id);
  const children = resolved["children:access-check:jobs"];
  assert.equal(children.length, 2);
  assert.ok(children.every((c) => typeof c.id === "string" && c.done === true));
  assert.deepEqual(children.map((c) => c.access).sort(), [false, true]);
  const projected = await client.getJobs([id], false, ["userId"]);
  assert.deepEqual(Object.keys(projected[0]).sort(), ["id", "userId"]);
});

test("unresolved children are Guild's job:<id> keys, which Guild code strips for getJobs", async () => {
  const client = new QueuesClient({
    url: server.url, declarePresets: false,
    flows: [{
      name: "fanned", lookupAttributes: ["batch"],
      stages: [
        { name: "fan-out", next: "fan-in", attributesToGet: ["batch"] },
        { name: "fan-in", next: "fan-read", children: [{ name: "part", attributesToGet: ["n"] }] },
        { name: "fan-read", attributesToGet: ["children:fan-in:jobs"] },
      ],
    }],
  });
  client.createWorkers("fanned", "fan-out", async () => ({
    nextQueue: "fan-in",
    "children:fan-in:params": [{ childName: "part", n: 1 }, { childName: "part", n: 2 }],
  }), 1, 10, 0.2);
  client.createParentWorkers("fanned", "fan-in", 1);
  client.createChildWorkers("fanned", "fan-in", "part", async (input) => ({ done: true, doubled: input.n * 2 }), 1, 10, 0.2);
  // A Guild stage after the join reads its children the way Guild code does.
  let readByWorker;
  client.createWorkers("fanned", "fan-read", async (input) => {
    const keys = input["children:fan-in:jobs"];
    readByWorker = { keys, children: await client.getJobs(keys.map((k) => k.replace(/^job:/, ""))) };
    return { done: true };
  }, 1, 10, 0.2);
  await client.startAll();
  const id = await client.createJob("fanned", { batch: "b-1" });
  await eventually(async () => (await job(client, id))?.done === true, "the fanned flow to finish");
  await client.stopAll();

  const [parent] = await client.getJobsByKey("fanned", "batch", "b-1", false);
  const keys = parent["children:fan-in:jobs"];
  assert.equal(keys.length, 2);
  for (const key of keys) assert.match(key, /^job:fan-in:part:[0-9a-f-]{36}$/);
  assert.deepEqual((await job(client, id))["children:fan-in:jobs"], keys, "getJobs shows the same keys");
  const children = await client.getJobs(keys.map((k) => k.replace(/^job:/, "")));
  assert.deepEqual(children.map((c) => c.id), keys.map((k) => k.slice("job:".length)));
  assert.deepEqual(children.map((c) => c.doubled).sort(), [2, 4]);
  assert.deepEqual(readByWorker.keys, keys, "a worker's input carries the same keys");
  assert.deepEqual(readByWorker.children.map((c) => c.doubled).sort(), [2, 4]);
  // Resolved, the children are the jobs themselves, as in Guild.
  const [resolved] = await client.getJobsByKey("fanned", "batch", "b-1", true);
  assert.deepEqual(resolved["children:fan-in:jobs"].map((c) => c.id).sort(), children.map((c) => c.id).sort());
});

test("thrown errors are retried, then recorded as failed", async () => {
  const client = new QueuesClient({
    url: server.url, declarePresets: false,
    flows: [{ name: "retrying", stages: [{ name: "flaky", maxRetries: 1 }] }],
  });
  const retries = [];
  client.createWorkers("retrying", "flaky", async (input) => {
    retries.push(input.retries);
    throw new Error("remote said no");
  }, 1, 10, 0.2);
  await client.startAll();
  const id = await client.createJob("retrying", { priority: 1 });
  const failed = await eventually(async () => {
    const j = await job(client, id);
    return j?.failed === true && j;
  }, "the job to fail");
  await client.stopAll();
  assert.deepEqual(retries, [0, 1]);
  assert.equal(failed.done, true);
  assert.equal(failed.failedQueue, "flaky");
  assert.equal(failed.failedErrorMsg, "remote said no");
});

test("DelayError puts a job off and the server resumes it", async () => {
  const client = new QueuesClient({
    url: server.url, declarePresets: false,
    flows: [{ name: "delaying", stages: [{ name: "later", delayable: true }] }],
  });
  const runs = [];
  client.createWorkers("delaying", "later", async (input) => {
    runs.push(Date.now());
    if (runs.length === 1) throw new DelayError("not yet", Date.now() + 300);
    return { done: true, delayed: input.delay };
  }, 1, 10, 0.2);
  await client.startAll();
  const id = await client.createJob("delaying", { priority: 1 });
  const done = await eventually(async () => {
    const j = await job(client, id);
    return j?.done === true && j;
  }, "the delayed job to finish");
  await client.stopAll();
  assert.equal(runs.length, 2);
  assert.ok(runs[1] - runs[0] >= 250, `resumed after ${runs[1] - runs[0]} ms`);
  assert.equal(done.delayReason, "not yet");
});

test("a function past lockTimeSec fails its job with Guild's message", async () => {
  const client = new QueuesClient({
    url: server.url, declarePresets: false,
    flows: [{ name: "slowflow", stages: [{ name: "slow" }] }],
  });
  client.createWorkers("slowflow", "slow", () => new Promise((r) => setTimeout(() => r({ done: true }), 1500)), 1, 0.3, 0.2);
  await client.startAll();
  const id = await client.createJob("slowflow", { priority: 1 });
  const failed = await eventually(async () => {
    const j = await job(client, id);
    return j?.failed === true && j;
  }, "the job to time out");
  await client.stopAll();
  assert.equal(failed.failedErrorMsg, "Execution timeout of 0.3 seconds exceeded");
});

test("stopAll waits for the job in hand", async () => {
  const client = new QueuesClient({
    url: server.url, declarePresets: false,
    flows: [{ name: "graceful", stages: [{ name: "finish-me" }] }],
  });
  let started;
  const running = new Promise((r) => (started = r));
  client.createWorkers("graceful", "finish-me", async () => {
    started();
    await new Promise((r) => setTimeout(r, 400));
    return { done: true };
  }, 1, 10, 0.2);
  await client.startAll();
  const id = await client.createJob("graceful", { priority: 1 });
  await running;
  await client.stopAll();
  assert.ok(client.workers.every((w) => w.status === "stopped"));
  assert.equal((await job(client, id)).done, true);
});

test("both correlator shapes see the job's correlation id", async () => {
  const store = new AsyncLocalStorage();
  const expressShape = () => (req, _res, next) => store.run(req.get("x-correlation-id"), next);
  const packageShape = { withId: (id, work) => store.run(id, work), getId: () => store.getStore() };
  for (const [i, correlator] of [expressShape, packageShape].entries()) {
    const client = new QueuesClient({ url: server.url, correlator });
    let seen;
    client.createWorkers("points-snapshot", "take-points-snapshot", async () => {
      seen = store.getStore();
      return { done: true };
    }, 1, 10, 0.2);
    await client.startAll();
    const id = await client.createJob("points-snapshot", { priority: 1, guildId: 5, correlationId: `c-${i}` });
    await eventually(async () => (await job(client, id))?.done, "the snapshot job");
    await client.stopAll();
    assert.equal(seen, `c-${i}`);
  }
});

test("deleteJob answers [1] then []; unknown flows are refused", async () => {
  const client = new QueuesClient({ url: server.url });
  await client.connect();
  const id = await client.createJob("messaging", { priority: 1, guildId: 3 });
  assert.deepEqual(await client.deleteJob("messaging", id), [1]);
  assert.deepEqual(await client.deleteJob("messaging", id), []);
  assert.deepEqual(await client.getJobs([id]), []);
  await assert.rejects(client.createJob("no-such-flow", { priority: 1 }), { code: "unknown_flow" });
});

test("the published per-flow API: createAccessFlow", async () => {
  const flow = createAccessFlow({ url: server.url, logger: console });
  const id = await flow.createJob({ priority: 1, userId: 777, guildId: 8, roleIds: [1] });
  const found = await flow.getJobsByKey("userId", 777, false);
  assert.deepEqual(found.map((j) => j.id), [id]);
  assert.deepEqual(await flow.deleteJob(id.split(":").slice(1).join(":")), [1]);
});

test("FlowMonitor shows queue contents and positions", async () => {
  const client = new QueuesClient({
    url: server.url, declarePresets: false,
    flows: [{ name: "watched", stages: [{ name: "watched-stage", priorities: 2 }] }],
  });
  await client.connect();
  const ids = [];
  for (const priority of [2, 1, 1]) ids.push(await client.createJob("watched", { priority }));
  const monitor = new FlowMonitor({ url: server.url, intervalMs: 100 });
  await monitor.start();
  await monitor.stop();
  const queue = monitor.jobsInQueues.find((q) => q.queueName === "watched-stage");
  assert.deepEqual(queue.priorities[1].waiting, [ids[1], ids[2]]);
  assert.deepEqual(queue.priorities[2].waiting, [ids[0]]);
  assert.deepEqual(monitor.jobIdToPositionMap.get(ids[2]), { queueName: "watched-stage", position: 2, state: "waiting" });
});

test("Queue objects become stage definitions", () => {
  const q = new Queue({
    queueName: "access-check", nextQueueNameMap: new Map([["access", "access-logic"]]),
    nextQueuePriorityDiffMap: new Map([["status-update", -1]]), priorities: 2, maxRetries: 10,
    children: [{ queueName: "requirement", attributesToGet: ["requirementId"] }],
  });
  assert.deepEqual(q.toStage("access"), {
    name: "access-check", next: "access-logic", priorities: 2, maxRetries: 10, delayable: false,
    children: [{ name: "requirement", attributesToGet: ["requirementId"], delayable: false }],
  });
  assert.equal(q.toStage("status-update").priorityDiff, -1);
});

test("the package loads by name (a path dependency) and with require", async () => {
  const { mkdtempSync, mkdirSync, symlinkSync, writeFileSync } = await import("node:fs");
  const { execFileSync } = await import("node:child_process");
  const { join, resolve, dirname } = await import("node:path");
  const { tmpdir } = await import("node:os");
  const { fileURLToPath } = await import("node:url");
  const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");
  const app = mkdtempSync(join(tmpdir(), "jobyard-app-"));
  mkdirSync(join(app, "node_modules", "@jobyard"), { recursive: true });
  symlinkSync(pkg, join(app, "node_modules", "@jobyard", "queues"));
  writeFileSync(join(app, "esm.mjs"), 'import { QueuesClient, DelayError } from "@jobyard/queues"; console.log(typeof QueuesClient, typeof DelayError);');
  writeFileSync(join(app, "cjs.cjs"), `const q = require(${JSON.stringify(pkg)}); console.log(typeof q.QueuesClient, typeof q.FlowMonitor);`);
  assert.equal(execFileSync(process.execPath, [join(app, "esm.mjs")]).toString().trim(), "function function");
  // require() of an ES module needs Node >= 20.19 (process.features.require_module).
  if (process.features.require_module) {
    assert.equal(execFileSync(process.execPath, [join(app, "cjs.cjs")]).toString().trim(), "function function");
  }
});
