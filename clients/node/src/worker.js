// A Guild worker on jobyard: one loop per worker, leasing from one stage with a long
// poll, running the worker function, and reporting complete / fail / delay with the
// lease's fencing token. Stop waits for the job in hand, as Guild's does.
//
// What the server does that Guild's janitor did: lease expiry (retry or fail with
// "<stage> lock time exceeded"), resuming delayed jobs, fan-out and fan-in. So there is
// no FlowMonitor to run beside workers and a ParentWorker has nothing to do.

import { DelayError } from "./errors.js";
import { seg } from "./api.js";
import { uuidv7 } from "./uuid.js";
import { withCorrelation } from "./correlate.js";
import { toGuildInput } from "./shape.js";

const DEFAULT_LOCK_TIME_SEC = 180;
const DEFAULT_BLOCK_TIMEOUT_SEC = 3;
/** The server keeps a lease this much longer than the worker's own timeout (Guild: +2 s),
 * so a timed-out job is failed by its worker, with its message, not by the server. */
const LEASE_GRACE_MS = 2000;
/** Pause after a failed call (server down) before trying again. */
const RETRY_PAUSE_MS = 1000;

const quiet = { debug() {}, verbose() {}, info() {}, warn() {}, error() {} };

/** A worker of one stage (a queue); `queueName` may be `<parent>:<child>`. */
export class Worker {
  constructor({ api, flowName, queueName, workerFunction, lockTimeSec, blockTimeoutSec, logger, correlator }) {
    this.id = uuidv7();
    this.flowName = flowName;
    this.queue = { queueName };
    this.workerFunction = workerFunction;
    this.lockTimeSec = lockTimeSec ?? DEFAULT_LOCK_TIME_SEC;
    this.blockTimeoutSec = blockTimeoutSec ?? DEFAULT_BLOCK_TIMEOUT_SEC;
    this.status = "ready";
    this.api = api;
    this.logger = logger ?? quiet;
    this.correlator = correlator;
    this.session = undefined;
    this.abort = undefined;
    this.loop = undefined;
  }

  /** Kept for Guild's API: there is no connection of its own to open. */
  async connect() {}

  /** Ends the worker session on the server (a lease it still held is given back). */
  async disconnect() {
    const session = this.session;
    this.session = undefined;
    if (session) await this.api.delete(`/v1/workers/${seg(session)}`).catch(() => {});
  }

  /** Starts leasing (returns at once, as Guild's does). */
  start() {
    if (this.status === "running") return;
    this.status = "running";
    // One per run of the worker, not per lease: stop() aborts the long poll in flight.
    this.abort = new AbortController();
    this.loop = this.run();
  }

  /** Stops leasing and resolves once the job in hand (if any) has been reported. */
  async stop() {
    if (this.status !== "running") {
      this.status = "stopped";
      return;
    }
    this.status = "stopping";
    this.abort?.abort();
    await this.loop;
    this.status = "stopped";
  }

  async run() {
    // A job handed out with the last report's reply: run it before leasing again.
    let next = null;
    while (this.status === "running") {
      if (next) {
        next = await this.execute(next);
        continue;
      }
      let job = null;
      try {
        job = await this.lease();
      } catch (e) {
        if (this.status !== "running") break;
        if (e.code === "unknown_worker") {
          this.session = undefined;
          continue;
        }
        this.logger.error(`lease from ${this.queue.queueName} failed: ${e.message}`, { workerId: this.id });
        await pause(RETRY_PAUSE_MS);
        continue;
      }
      if (job) next = await this.execute(job);
    }
    // A job handed out with a report as the stop came was not started: ending the session
    // (disconnect) makes it ready again for another worker.
  }

  async lease() {
    const body = {
      lease_ms: this.leaseMs(),
      wait_ms: Math.min(60000, Math.max(0, Math.round(this.blockTimeoutSec * 1000))),
    };
    if (this.session) body.worker = this.session;
    const path = `/v1/stages/${seg(this.queue.queueName)}/lease`;
    const reply = await this.api.post(path, body, this.abort.signal);
    this.session = reply.worker;
    return reply.job;
  }

  /** The lease asked for: Guild's lock time, and the grace past it. */
  leaseMs() {
    return Math.round(this.lockTimeSec * 1000) + LEASE_GRACE_MS;
  }

  /** Runs the function with Guild's execution timeout and reports what it did. The report
   * also asks for the next job if one is ready now (`next`, no wait, so the report is
   * answered at once): a busy worker leases and reports in one request per job. Resolves
   * to that next job, or null. */
  async execute(job) {
    const input = toGuildInput(job.input);
    const log = { workerId: this.id, jobId: job.id, queueName: this.queue.queueName };
    const token = { worker: this.session, token: job.token };
    let outcome;
    try {
      const result = await withCorrelation(this.correlator, input.correlationId, () =>
        this.callWithTimeout(job, token, input),
      );
      outcome = result
        ? ["complete", { ...token, result }]
        : ["fail", { ...token, error: "the worker function returned no result" }];
    } catch (e) {
      if (e instanceof DelayError) {
        outcome = ["delay", { ...token, ready_at_ms: Math.max(0, Math.round(e.readyTimestamp)), reason: e.message }];
      } else {
        outcome = ["fail", { ...token, error: String(e?.message ?? e) }];
      }
    }
    const [verb, body] = outcome;
    const path = `/v1/flow-jobs/${seg(job.id)}/${verb}`;
    if (this.status === "running" && this.api.reportsLeaseNext !== false) {
      body.next = { wait_ms: 0, lease_ms: this.leaseMs() };
    }
    try {
      let reply;
      try {
        reply = await this.api.post(path, body);
      } catch (e) {
        // A server older than `next` refuses the unknown field, having applied nothing:
        // report again without it, and never ask that server again.
        if (!(body.next && e.code === "bad_json" && /`next`/.test(e.message))) throw e;
        this.api.reportsLeaseNext = false;
        delete body.next;
        reply = await this.api.post(path, body);
      }
      this.logger.debug(`job ${verb}: now ${reply.status} in ${reply.stage}`, log);
      return reply.next?.job ?? null;
    } catch (e) {
      this.logger.warn(`could not ${verb} the job: ${e.message}`, log);
      return null;
    }
  }

  /** The function races Guild's timeout; the timer handed to it can be refreshed, and
   * a refresh also extends the lease on the server. */
  callWithTimeout(job, token, input) {
    const ms = Math.round(this.lockTimeSec * 1000);
    let timer;
    const expired = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`Execution timeout of ${this.lockTimeSec} seconds exceeded`)), ms);
    });
    const api = this.api;
    const handle = {
      refresh() {
        timer.refresh();
        api
          .post(`/v1/flow-jobs/${seg(job.id)}/heartbeat`, { ...token, lease_ms: ms + LEASE_GRACE_MS })
          .catch(() => {});
        return handle;
      },
      ref: () => (timer.ref(), handle),
      unref: () => (timer.unref(), handle),
      hasRef: () => timer.hasRef(),
    };
    const running = Promise.resolve().then(() => this.workerFunction(input, handle));
    return Promise.race([running, expired]).finally(() => clearTimeout(timer));
  }
}

/** Guild's ParentWorker waited for children by polling. jobyard fans out and joins on the
 * server, so this worker only keeps the API: it starts, stops and leases nothing. */
export class ParentWorker extends Worker {
  start() {
    this.status = "running";
  }

  async stop() {
    this.status = "stopped";
  }
}

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
