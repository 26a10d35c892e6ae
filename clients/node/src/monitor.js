// Guild's FlowMonitor, read from the server. In Guild it was also the janitor (requeueing
// expired leases, resuming delays); jobyard does that itself, so this only reads: queue
// contents per stage and priority, and each job's position, refreshed every intervalMs.

import { Api, seg } from "./api.js";

export class FlowMonitor {
  /** @param {{url?: string, token?: string, ca?: string | Buffer | Array<string | Buffer>, logger?: object, dogStatsD?: {gauge: Function}, intervalMs?: number, transport?: "lean" | "node", maxSockets?: number}} options
   * `url`, `token` and `ca` as QueuesClient's (a read token is enough: it only reads). */
  constructor({ url, token, ca, logger, dogStatsD, intervalMs = 1000, transport, maxSockets } = {}) {
    this.api = new Api(url, { transport, token, ca, maxSockets });
    this.logger = logger;
    this.dogStatsD = dogStatsD;
    this.intervalMs = intervalMs;
    /** [{ queueName, priorities: { [p]: { waiting: id[], processing: id[], delayed: {jobId, readyTimestamp}[] } } }] */
    this.jobsInQueues = [];
    /** id → { queueName, position (1-based, within its priority), state, readyTimestamp? } */
    this.jobIdToPositionMap = new Map();
    /** Always empty: expired leases are handled by the server, never seen as lock-less. */
    this.lockMissingQueueNameJobIdPairsSet = new Set();
    this.timer = undefined;
    this.running = undefined;
  }

  /** Reads once, then every intervalMs. */
  async start() {
    await this.refresh();
    this.timer = setInterval(() => {
      this.running ??= this.refresh().finally(() => (this.running = undefined));
    }, this.intervalMs);
  }

  /** Stops refreshing; resolves when a refresh in progress has ended. */
  async stop() {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /** Every stage of every declared flow, children included. */
  async stageNames() {
    const { flows } = await this.api.get("/v1/flows");
    const names = new Set();
    for (const flow of flows) {
      for (const stage of flow.stages) {
        names.add(stage.name);
        for (const child of stage.children ?? []) names.add(`${stage.name}:${child.name}`);
      }
    }
    return [...names];
  }

  async refresh() {
    try {
      const queues = [];
      const positions = new Map();
      for (const queueName of await this.stageNames()) {
        const { jobs } = await this.api.get(`/v1/stages/${seg(queueName)}/jobs`);
        const priorities = {};
        const level = (p) => (priorities[p] ??= { waiting: [], processing: [], delayed: [] });
        for (const job of jobs) {
          const bucket = level(job.priority);
          if (job.state === "waiting") {
            bucket.waiting.push(job.id);
            positions.set(job.id, { queueName, position: bucket.waiting.length, state: "waiting" });
          } else if (job.state === "leased") {
            bucket.processing.push(job.id);
            positions.set(job.id, { queueName, position: bucket.processing.length, state: "processing" });
          } else if (job.state === "delayed") {
            bucket.delayed.push({ jobId: job.id, readyTimestamp: job.ready_at_ms });
            positions.set(job.id, {
              queueName, position: bucket.delayed.length, state: "delayed", readyTimestamp: job.ready_at_ms,
            });
          }
        }
        queues.push({ queueName, priorities });
        this.gauges(queueName, priorities);
      }
      this.jobsInQueues = queues;
      this.jobIdToPositionMap = positions;
    } catch (e) {
      this.logger?.error(`FlowMonitor refresh failed: ${e.message}`);
    }
  }

  gauges(queueName, priorities) {
    if (!this.dogStatsD) return;
    for (const [p, lists] of Object.entries(priorities)) {
      this.dogStatsD.gauge(`queue.${queueName}.${p}.waiting.length`, lists.waiting.length);
      this.dogStatsD.gauge(`queue.${queueName}.${p}.processing.length`, lists.processing.length);
      this.dogStatsD.gauge(`queue.${queueName}.${p}.delayed.length`, lists.delayed.length);
    }
  }
}
