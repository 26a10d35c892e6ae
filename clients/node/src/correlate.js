// Guild's users pass a correlator in one of two shapes (flows-guild-api.md §2): the
// express-correlation-id middleware factory, which the library calls as
// `correlator()({ get: () => id }, null, next)`, or an object with `withId(id, work)`
// (the `correlation-id` package). Both are accepted; anything else runs the work as is.

/** Runs `work` (returning a promise) inside the correlation context of `id`. */
export function withCorrelation(correlator, id, work) {
  if (!correlator || id === undefined || id === null) return work();
  if (typeof correlator === "function") {
    return new Promise((resolve, reject) => {
      correlator()({ get: () => id, header: () => id }, null, () => {
        work().then(resolve, reject);
      });
    });
  }
  if (typeof correlator.withId === "function") {
    return Promise.resolve(correlator.withId(id, work));
  }
  return work();
}
