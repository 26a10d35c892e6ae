// Errors a user of the library sees: DelayError is thrown by worker functions (as in
// Guild) to postpone a job; JobyardError is a refusal from the server, with its stable code.

/** Thrown by a worker function to put the job off until `readyTimestamp` (ms since epoch). */
export class DelayError extends Error {
  constructor(reason, readyTimestamp) {
    super(reason);
    this.name = "DelayError";
    this.readyTimestamp = readyTimestamp;
  }
}

/** The server refused a request; `code` is stable (docs/http-api.md, "Errors"). */
export class JobyardError extends Error {
  constructor(status, code, message) {
    super(`jobyard refused (${status} ${code}): ${message}`);
    this.name = "JobyardError";
    this.status = status;
    this.code = code;
  }
}
