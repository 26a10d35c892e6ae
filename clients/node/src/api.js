// One JSON request to jobyard's HTTP API. Everything else in the package goes through
// here, so the URL, the error shape and cancellation are handled once.
//
// Requests go through node:http (node:https for an https URL) with a keep-alive agent of
// this client's own, not through fetch: for small JSON requests on a kept connection it
// costs a Node process about a seventh of fetch's CPU per request (0.06–0.09 ms against
// 0.5–0.7 ms, measured in docs/benchmarks.md, "Flows"), and a worker's requests are nearly
// all such.

import http from "node:http";
import https from "node:https";

import { JobyardError } from "./errors.js";

/** Talks to one jobyard HTTP listener (`url` like "http://127.0.0.1:8080"). */
export class Api {
  constructor(url) {
    if (typeof url !== "string" || !/^https?:\/\/[^/]+/.test(url)) {
      throw new TypeError(`jobyard url must be like "http://127.0.0.1:8080", got ${url}`);
    }
    this.base = url.replace(/\/+$/, "");
    const parsed = new URL(this.base);
    this.transport = parsed.protocol === "https:" ? https : http;
    this.hostname = parsed.hostname.replace(/^\[(.*)\]$/, "$1");
    this.port = parsed.port || (parsed.protocol === "https:" ? 443 : 80);
    this.prefix = parsed.pathname.replace(/\/+$/, "");
    // Connections are kept and reused; an idle one is closed by us after a while rather
    // than left for the server or a proxy to cut under a request.
    this.agent = new this.transport.Agent({ keepAlive: true, timeout: 60_000, scheduling: "lifo" });
  }

  /** Sends `body` as JSON; resolves to the reply's JSON or rejects with JobyardError. */
  call(method, path, body, signal) {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers = payload === undefined
      ? {}
      : { "content-type": "application/json", "content-length": Buffer.byteLength(payload) };
    return new Promise((resolve, reject) => {
      const request = this.transport.request(
        { hostname: this.hostname, port: this.port, method, path: this.prefix + path, headers, agent: this.agent, signal },
        (response) => {
          const chunks = [];
          response.on("data", (chunk) => chunks.push(chunk));
          response.on("error", reject);
          response.on("end", () => {
            const text = chunks.length === 1 ? chunks[0].toString() : Buffer.concat(chunks).toString();
            try {
              resolve(reply(response.statusCode, text));
            } catch (e) {
              reject(e);
            }
          });
        },
      );
      request.on("error", reject);
      request.end(payload);
    });
  }

  get(path, signal) {
    return this.call("GET", path, undefined, signal);
  }

  post(path, body, signal) {
    return this.call("POST", path, body ?? {}, signal);
  }

  delete(path) {
    return this.call("DELETE", path);
  }

  /** Closes the kept connections (they would otherwise close after a minute idle). */
  close() {
    this.agent.destroy();
  }
}

/** The reply's JSON, or a JobyardError with the server's code for a non-2xx status. */
function reply(status, text) {
  let json;
  try {
    json = text ? JSON.parse(text) : {};
  } catch {
    throw new JobyardError(status, "not_json", text.slice(0, 200));
  }
  if (status < 200 || status > 299) {
    const error = json.error ?? {};
    throw new JobyardError(status, error.code ?? "unknown", error.message ?? text);
  }
  return json;
}

/** A path segment with everything but unreserved characters percent-encoded. */
export const seg = (s) => encodeURIComponent(String(s));
