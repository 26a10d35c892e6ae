// @jobyard/queues: the @guildxyz/queues API on a jobyard server. Both of Guild's public
// surfaces: QueuesClient (current) and the per-flow `Flow` objects (published 0.0.8).

export { QueuesClient } from "./client.js";
export { Worker, ParentWorker } from "./worker.js";
export { DelayError, JobyardError } from "./errors.js";
export { FlowMonitor } from "./monitor.js";
export { Flow, createAccessFlow, createStatusUpdateFlow } from "./flow.js";
export { Queue } from "./queue.js";
export { presets, access, statusUpdate, messaging, pointsSnapshot } from "./presets.js";
