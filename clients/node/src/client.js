// Guild's QueuesClient on jobyard. The one change for a user is the connection option:
// `redisClientOptions` becomes `url`, the base URL of jobyard's HTTP listener (with
// `token` and `ca` for a secured one).

import { Api, seg } from "./api.js";
import { Worker, ParentWorker } from "./worker.js";
import { presets } from "./presets.js";
import { toGuildJob } from "./shape.js";

/** Ids in one lookup request: the server's most (docs/http-api.md, "Limits"). */
export const LOOKUP_MAX_IDS = 1000;

/** The query string of a read: children resolved, fields projected. */
function readQuery(resolveChildren, keysToGet) {
  const q = [];
  if (resolveChildren) q.push("resolve_children=true");
  if (keysToGet?.length) q.push(`fields=${keysToGet.map(encodeURIComponent).join(",")}`);
  return q.length ? `?${q.join("&")}` : "";
}

export class QueuesClient {
  /**
   * @param {{url?: string, token?: string, ca?: string | Buffer | Array<string | Buffer>, logger?: object, correlator?: any, flows?: object[], declarePresets?: boolean, transport?: "lean" | "node", maxSockets?: number}} options
   *   `url`, `token`, `ca`: the server, the token sent as `authorization: Bearer`, the CA
   *   (PEM) trusted for https:; each defaults to JOBYARD_URL (else
   *   http://127.0.0.1:8080), JOBYARD_TOKEN, JOBYARD_CA_CERT (a PEM file).
   *   `flows`: definitions of your own flows, declared on connect. Guild's four built-in
   *   flows are declared on connect unless the server already has a flow of that name
   *   (or `declarePresets: false`). `transport: "node"` sends plain http: through
   *   node:http instead of the package's own transport (api.js). `maxSockets`: the most
   *   connections open at once besides one per worker (default 64; api.js).
   */
  constructor({ url, token, ca, logger, correlator, flows = [], declarePresets = true, transport, maxSockets } = {}) {
    this.api = new Api(url, { transport, token, ca, maxSockets });
    this.logger = logger;
    this.correlator = correlator;
    this.flows = flows;
    this.declarePresets = declarePresets;
    this.workers = [];
    this.connected = undefined;
  }

  /** Checks the server answers and declares the flows this client brings. */
  connect() {
    this.connected ??= this.declare().catch((e) => {
      this.connected = undefined;
      throw e;
    });
    return this.connected;
  }

  async declare() {
    const { flows: existing } = await this.api.get("/v1/flows");
    const have = new Set(existing.map((f) => f.name));
    const wanted = this.declarePresets ? Object.values(presets()).filter((f) => !have.has(f.name)) : [];
    for (const definition of [...wanted, ...this.flows]) await this.declareFlow(definition);
  }

  /** Declares (or replaces) a flow at run time; jobyard's addition to Guild's API. */
  declareFlow(definition) {
    return this.api.post("/v1/flows", definition);
  }

  /** Kept for Guild's API: HTTP needs no connection to close. */
  async disconnect() {
    this.connected = undefined;
  }

  /** Creates a job in `flowName`'s first stage; resolves to its id `<flow>:<uuidv7>`.
   * `options.priority` defaults to 1; `options.idempotencyKey` makes a retry safe. */
  async createJob(flowName, options = {}) {
    const { priority = 1, idempotencyKey, ...params } = options;
    const body = { priority, params: { ...params } };
    if (idempotencyKey !== undefined) body.idempotency_key = String(idempotencyKey);
    const reply = await this.api.post(`/v1/flows/${seg(flowName)}/jobs`, body);
    return reply.id;
  }

  /** Deletes a job with its children and lookup entries: `[1]`, or `[]` if it did not exist. */
  async deleteJob(flowName, jobId) {
    const id = String(jobId).includes(":") ? String(jobId) : `${flowName}:${jobId}`;
    try {
      await this.api.delete(`/v1/flow-jobs/${seg(id)}`);
      return [1];
    } catch (e) {
      if (e.code === "not_found") return [];
      throw e;
    }
  }

  /** The jobs that still exist, in the order asked, each with its own `id`. Looked up
   * LOOKUP_MAX_IDS at a time, one request each. */
  async getJobs(jobIds, resolveChildren = false, keysToGet) {
    const chunks = [];
    for (let i = 0; i < jobIds.length; i += LOOKUP_MAX_IDS) {
      chunks.push(jobIds.slice(i, i + LOOKUP_MAX_IDS).map(String));
    }
    const replies = await Promise.all(chunks.map((ids) => {
      const body = { ids, resolve_children: Boolean(resolveChildren) };
      if (keysToGet?.length) body.fields = keysToGet.map(String);
      return this.api.post("/v1/flow-jobs/lookup", body);
    }));
    return replies.flatMap(({ jobs }) => jobs.map(toGuildJob));
  }

  /** The jobs whose lookup attribute `keyName` had `value` at creation, oldest first. */
  async getJobsByKey(flowName, keyName, value, resolveChildren = false, keysToGet) {
    const extra = readQuery(resolveChildren, keysToGet).replace("?", "&");
    const path = `/v1/flows/${seg(flowName)}/jobs?key=${encodeURIComponent(keyName)}&value=${encodeURIComponent(String(value))}${extra}`;
    const { jobs } = await this.api.get(path);
    return jobs.map(toGuildJob);
  }

  /** `count` workers of stage `queueName` running `workerFunction`. */
  createWorkers(flowName, queueName, workerFunction, count, lockTimeSec, blockTimeoutSec) {
    return this.spawn(Worker, { flowName, queueName, workerFunction, lockTimeSec, blockTimeoutSec }, count);
  }

  /** Guild's parent workers: the server joins children itself, so these lease nothing. */
  createParentWorkers(flowName, queueName, count, lockTimeSec, blockTimeoutSec) {
    return this.spawn(ParentWorker, { flowName, queueName, lockTimeSec, blockTimeoutSec }, count);
  }

  /** `count` workers of the child stage `<parentQueueName>:<childName>`. */
  createChildWorkers(flowName, parentQueueName, childName, workerFunction, count, lockTimeSec, blockTimeoutSec) {
    const queueName = `${parentQueueName}:${childName}`;
    return this.spawn(Worker, { flowName, queueName, workerFunction, lockTimeSec, blockTimeoutSec }, count);
  }

  spawn(Kind, options, count) {
    this.api.reserveConnections(count);
    const made = Array.from(
      { length: count },
      () => new Kind({ ...options, api: this.api, logger: this.logger, correlator: this.correlator }),
    );
    this.workers.push(...made);
    return made;
  }

  /** Connects and starts every worker created through this client. */
  async startAll() {
    await this.connect();
    for (const w of this.workers) {
      await w.connect();
      w.start();
    }
  }

  /** Stops every worker (each finishes and reports its job in hand), then disconnects. */
  async stopAll() {
    await Promise.all(this.workers.map((w) => w.stop()));
    await Promise.all(this.workers.map((w) => w.disconnect()));
    await this.disconnect();
  }
}
