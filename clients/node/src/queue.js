// Guild's `Queue` options object, kept so code that builds its own queues keeps working;
// `toStage()` turns it into a jobyard stage definition for QueuesClient.declareFlow.

export class Queue {
  constructor(options) {
    Object.assign(this, options);
  }

  /** This queue as a stage of `flowName` (its per-flow routing and priority shift applied). */
  toStage(flowName) {
    const get = (map) => (map instanceof Map ? map.get(flowName) : map?.[flowName]);
    const stage = { name: this.queueName };
    const next = this.nextQueueName ?? get(this.nextQueueNameMap);
    if (next) stage.next = next;
    const diff = get(this.nextQueuePriorityDiffMap);
    if (diff) stage.priorityDiff = diff;
    if (this.attributesToGet?.length) stage.attributesToGet = this.attributesToGet;
    if (this.priorities) stage.priorities = this.priorities;
    if (this.maxRetries) stage.maxRetries = this.maxRetries;
    stage.delayable = Boolean(this.delayable);
    if (this.limiter) {
      const { reservoir, intervalMs, groupJobKey } = this.limiter;
      stage.limiter = { reservoir, intervalMs, ...(groupJobKey ? { groupJobKey } : {}) };
    }
    if (this.children?.length) {
      stage.children = this.children.map((c) => {
        const { next, priorityDiff, children, ...child } = new Queue(c).toStage(flowName);
        return child;
      });
    }
    return stage;
  }
}
