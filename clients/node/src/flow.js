// The published per-flow API of @guildxyz/queues 0.0.8: one `Flow` object per flow,
// made by createAccessFlow / createStatusUpdateFlow. Each call is the QueuesClient's with
// the flow's name filled in, on the same server-side flows.

import { QueuesClient } from "./client.js";

export class Flow {
  /** `options`: `url`, `token`, `ca`, `logger`, `correlator`, `transport`, `maxSockets`,
   * as QueuesClient's. */
  constructor(name, { url, token, ca, logger, correlator, transport, maxSockets } = {}) {
    this.name = name;
    this.client = new QueuesClient({ url, token, ca, logger, correlator, transport, maxSockets });
  }

  get workers() {
    return this.client.workers;
  }

  /** Creates a job; resolves to its id (`<flow>:<uuidv7>`; 0.0.8 returned the uuid part,
   * which every method here also accepts). */
  async createJob(options) {
    await this.client.connect();
    return this.client.createJob(this.name, options);
  }

  deleteJob(jobId) {
    return this.client.deleteJob(this.name, jobId);
  }

  getJobsByKey(keyName, value, resolveChildren = false) {
    return this.client.getJobsByKey(this.name, keyName, value, resolveChildren);
  }

  createWorkers(queueName, workerFunction, count, lockTimeSec, blockTimeoutSec) {
    return this.client.createWorkers(this.name, queueName, workerFunction, count, lockTimeSec, blockTimeoutSec);
  }

  createParentWorkers(queueName, count, lockTimeSec, blockTimeoutSec) {
    return this.client.createParentWorkers(this.name, queueName, count, lockTimeSec, blockTimeoutSec);
  }

  createChildWorkers(parentQueueName, childName, workerFunction, count, lockTimeSec, blockTimeoutSec) {
    return this.client.createChildWorkers(
      this.name, parentQueueName, childName, workerFunction, count, lockTimeSec, blockTimeoutSec,
    );
  }

  startAll() {
    return this.client.startAll();
  }

  stopAll() {
    return this.client.stopAll();
  }
}

/** Guild's access flow as a `Flow` object. */
export const createAccessFlow = (options) => new Flow("access", options);

/** Guild's status-update flow as a `Flow` object. */
export const createStatusUpdateFlow = (options) => new Flow("status-update", options);
