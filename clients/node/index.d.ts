// Type declarations for @jobyard/queues (the @guildxyz/queues API on jobyard).

export interface ILogger {
  debug: (message: string, meta?: object) => any;
  verbose: (message: string, meta?: object) => any;
  info: (message: string, meta?: object) => any;
  warn: (message: string, meta?: object) => any;
  error: (message: string, meta?: object) => any;
}

/** express-correlation-id's factory, or the `correlation-id` package's object. */
export type ICorrelator =
  | (() => (req: { get: (name: string) => string }, res: unknown, next: () => void) => void)
  | { withId: <T>(id: string, work: () => T) => T; getId?: () => string | undefined };

export interface LimiterOptions { reservoir: number; intervalMs: number; groupJobKey?: string }

/** A jobyard flow definition (docs/http-api.md, "Flows"). */
export interface StageDefinition {
  name: string;
  next?: string;
  priorityDiff?: number;
  priorities?: number;
  attributesToGet?: string[];
  maxRetries?: number;
  backoffMs?: number;
  leaseMs?: number;
  delayable?: boolean;
  limiter?: LimiterOptions;
  children?: Omit<StageDefinition, "next" | "priorityDiff" | "children">[];
}
export interface FlowDefinition {
  name: string;
  lookupAttributes?: string[];
  retentionSec?: number;
  stages: StageDefinition[];
}

/** PEM text of the CA(s) to trust for https: URLs, as node:tls takes it. */
export type CaPem = string | Buffer | Array<string | Buffer>;

/** Where the server is and what it takes to be let in; each defaults to an environment
 * variable, as `jobyard ctl` reads them. */
export interface ConnectionOptions {
  /** Base URL of jobyard's HTTP listener, e.g. "http://127.0.0.1:8080" or
   * "https://jobs.internal:8080" (Guild: redisClientOptions). Default: JOBYARD_URL, else
   * "http://127.0.0.1:8080". */
  url?: string;
  /** Sent as `authorization: Bearer <token>` on every request: a read token may look, an
   * admin token may also create jobs, declare flows and run workers. Default:
   * JOBYARD_TOKEN; "" sends none. */
  token?: string;
  /** The CA that signed an https: server's certificate, trusted instead of Node's built-in
   * roots. Default: the PEM file JOBYARD_CA_CERT names. */
  ca?: CaPem;
  /** The most connections open to the server at once (default 64), besides one per
   * worker created through the client; further requests wait for a free one. */
  maxSockets?: number;
}

export interface QueuesClientOptions extends ConnectionOptions {
  logger?: ILogger;
  correlator?: ICorrelator;
  /** Your own flows, declared on connect. */
  flows?: FlowDefinition[];
  /** Declare Guild's four flows on connect when the server lacks them (default true). */
  declarePresets?: boolean;
  /** Plain http: URLs go through the package's own HTTP/1.1 transport ("lean", the
   * default); "node" sends them through node:http. https: URLs always use node:https. */
  transport?: "lean" | "node";
}

export type WorkerJob = { id: string; retries: number; flowName: string; priority: number; correlationId?: string } & Record<string, any>;
export type WorkerResult = { nextQueue?: string; [field: string]: any };
export interface TimeoutHandle { refresh(): TimeoutHandle; ref(): TimeoutHandle; unref(): TimeoutHandle; hasRef(): boolean }
export type WorkerFunction = (job: WorkerJob, timeout?: TimeoutHandle) => Promise<WorkerResult>;

export type WorkerStatus = "ready" | "running" | "stopping" | "stopped";

export class Worker {
  readonly id: string;
  readonly queue: { queueName: string };
  lockTimeSec: number;
  blockTimeoutSec: number;
  status: WorkerStatus;
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  start(): void;
  stop(): Promise<void>;
}
export class ParentWorker extends Worker {}

export class QueuesClient {
  constructor(options?: QueuesClientOptions);
  workers: Worker[];
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  declareFlow(definition: FlowDefinition): Promise<{ name: string; replaced: boolean }>;
  createJob(flowName: string, options: { priority?: number; idempotencyKey?: string; [field: string]: any }): Promise<string>;
  deleteJob(flowName: string, jobId: string): Promise<number[]>;
  /** Unresolved, a parent's `children:<stage>:jobs` lists its children's keys `job:<child id>`
   * (Guild's hash keys: strip `job:` to pass them to getJobs); resolved, the child jobs. */
  getJobs(jobIds: string[], resolveChildren?: boolean, keysToGet?: string[]): Promise<Record<string, any>[]>;
  getJobsByKey(flowName: string, keyName: string, value: string | number, resolveChildren?: boolean, keysToGet?: string[]): Promise<Record<string, any>[]>;
  createWorkers(flowName: string, queueName: string, workerFunction: WorkerFunction, count: number, lockTimeSec?: number, blockTimeoutSec?: number): Worker[];
  createParentWorkers(flowName: string, queueName: string, count: number, lockTimeSec?: number, blockTimeoutSec?: number): ParentWorker[];
  createChildWorkers(flowName: string, parentQueueName: string, childName: string, workerFunction: WorkerFunction, count: number, lockTimeSec?: number, blockTimeoutSec?: number): Worker[];
  startAll(): Promise<void>;
  stopAll(): Promise<void>;
}

export class DelayError extends Error {
  constructor(reason: string, readyTimestamp: number);
  readyTimestamp: number;
}
export class JobyardError extends Error {
  status: number;
  code: string;
}

export interface JobPosition { queueName: string; position: number; state: "waiting" | "processing" | "delayed"; readyTimestamp?: number }
export class FlowMonitor {
  constructor(options?: ConnectionOptions & { logger?: ILogger; dogStatsD?: { gauge(name: string, value: number): void }; intervalMs?: number; transport?: "lean" | "node" });
  jobsInQueues: { queueName: string; priorities: Record<string, { waiting: string[]; processing: string[]; delayed: { jobId: string; readyTimestamp: number }[] }> }[];
  jobIdToPositionMap: Map<string, JobPosition>;
  lockMissingQueueNameJobIdPairsSet: Set<string>;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export interface FlowOptions extends ConnectionOptions { logger?: ILogger; correlator?: ICorrelator; transport?: "lean" | "node" }
export class Flow {
  readonly name: string;
  readonly workers: Worker[];
  createJob(options: Record<string, any>): Promise<string>;
  deleteJob(jobId: string): Promise<number[]>;
  getJobsByKey(keyName: string, value: string | number, resolveChildren?: boolean): Promise<Record<string, any>[]>;
  createWorkers(queueName: string, workerFunction: WorkerFunction, count: number, lockTimeSec?: number, blockTimeoutSec?: number): Worker[];
  createParentWorkers(queueName: string, count: number, lockTimeSec?: number, blockTimeoutSec?: number): ParentWorker[];
  createChildWorkers(parentQueueName: string, childName: string, workerFunction: WorkerFunction, count: number, lockTimeSec?: number, blockTimeoutSec?: number): Worker[];
  startAll(): Promise<void>;
  stopAll(): Promise<void>;
}
export function createAccessFlow(options?: FlowOptions): Flow;
export function createStatusUpdateFlow(options?: FlowOptions): Flow;

export interface QueueOptions {
  queueName: string;
  nextQueueName?: string;
  nextQueueNameMap?: Map<string, string>;
  nextQueuePriorityDiffMap?: Map<string, number>;
  attributesToGet?: string[];
  children?: QueueOptions[];
  limiter?: LimiterOptions & { id?: string };
  priorities?: number;
  delayable?: boolean;
  maxRetries?: number;
}
export class Queue {
  constructor(options: QueueOptions);
  toStage(flowName: string): StageDefinition;
}

export function presets(): Record<"access" | "status-update" | "messaging" | "points-snapshot", FlowDefinition>;
export function access(): FlowDefinition;
export function statusUpdate(): FlowDefinition;
export function messaging(): FlowDefinition;
export function pointsSnapshot(): FlowDefinition;
