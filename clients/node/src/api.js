// One JSON request to jobyard's HTTP API. Everything else in the package goes through
// here, so the URL, the error shape and cancellation are handled once.
//
// Plain http: URLs go through the package's own transport (transport.js: kept
// connections over node:net); https: URLs, or `transport: "node"`, through node:http(s)
// with a keep-alive agent of this client's own. Either is far cheaper per request than
// fetch for small JSON on a kept connection (docs/benchmarks.md, "Flows"), and a
// worker's requests are nearly all such.
//
// Either way at most `maxSockets` connections are open to the server (default
// DEFAULT_MAX_SOCKETS, and one more per worker: reserveConnections); requests beyond them
// wait for a free one instead of each opening its own.
//
// A token goes out as `authorization: Bearer <token>` on every request of either
// transport; a CA (PEM) is what node:https then trusts instead of Node's built-in roots.

import http from "node:http";
import https from "node:https";

import { JobyardError } from "./errors.js";
import { resolveConnection } from "./settings.js";
import { DEFAULT_MAX_SOCKETS, HttpTransport } from "./transport.js";

/** Talks to one jobyard HTTP listener (`url` like "http://127.0.0.1:8080").
 * `token` and `ca` are sent and trusted as above; `url`, `token` and `ca` default to
 * JOBYARD_URL, JOBYARD_TOKEN and JOBYARD_CA_CERT (settings.js).
 * `transport: "node"` sends plain http: through node:http too (for a proxy or a test
 * that needs node:http's behaviour). `maxSockets` bounds the connections open at once. */
export class Api {
  constructor(url, { transport, token, ca, maxSockets = DEFAULT_MAX_SOCKETS } = {}) {
    ({ url, token, ca } = resolveConnection({ url, token, ca }));
    if (typeof url !== "string" || !/^https?:\/\/[^/]+/.test(url)) {
      throw new TypeError(`jobyard url must be like "http://127.0.0.1:8080", got ${url}`);
    }
    this.base = url.replace(/\/+$/, "");
    const parsed = new URL(this.base);
    this.transport = parsed.protocol === "https:" ? https : http;
    this.hostname = parsed.hostname.replace(/^\[(.*)\]$/, "$1");
    this.port = parsed.port || (parsed.protocol === "https:" ? 443 : 80);
    this.prefix = parsed.pathname.replace(/\/+$/, "");
    if (transport !== undefined && transport !== "node" && transport !== "lean") {
      throw new TypeError(`jobyard transport must be "lean" or "node", got ${transport}`);
    }
    this.authorization = token === undefined ? undefined : `Bearer ${token}`;
    this.lean = parsed.protocol === "http:" && transport !== "node"
      ? new HttpTransport(this.hostname, this.port, parsed.host, { authorization: this.authorization, maxSockets })
      : null;
    // Through node:http(s), connections are kept and reused; an idle one is closed by us
    // after a while rather than left for the server or a proxy to cut under a request.
    const tls = parsed.protocol === "https:" && ca !== undefined ? { ca } : {};
    this.agent = this.lean
      ? null
      : new this.transport.Agent({ keepAlive: true, timeout: 60_000, scheduling: "lifo", maxSockets, ...tls });
  }

  /** Room for `count` more connections: a worker's long poll holds one for up to its block
   * timeout, and must not keep the application's other calls waiting behind it. */
  reserveConnections(count) {
    if (this.lean) this.lean.maxSockets += count;
    else this.agent.maxSockets += count;
  }

  /** Sends `body` as JSON; resolves to the reply's JSON or rejects with JobyardError. */
  call(method, path, body, signal) {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    if (this.lean) {
      return this.lean.request(method, this.prefix + path, payload, signal).then(({ status, text }) => reply(status, text));
    }
    const headers = payload === undefined
      ? {}
      : { "content-type": "application/json", "content-length": Buffer.byteLength(payload) };
    if (this.authorization) headers.authorization = this.authorization;
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
      request.on("error", (e) => reject(withTlsHint(e, this.base)));
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

  /** Closes the kept idle connections (node:http's would otherwise close after a minute
   * idle); the client stays usable. */
  close() {
    this.lean?.dropIdle();
    this.agent?.destroy();
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

/** Node's codes for a server certificate it does not trust (node:tls, OpenSSL's names). */
const UNTRUSTED_CERTIFICATE = /CERT|SELF_SIGNED|UNABLE_TO_(VERIFY|GET_ISSUER)/;

/** `e`, its message saying what to check when TLS did not trust the server: node's own
 * ("unable to verify the first certificate") names neither the server nor the remedy. */
function withTlsHint(e, base) {
  if (typeof e?.code === "string" && UNTRUSTED_CERTIFICATE.test(e.code)) {
    e.message = `TLS: ${base} presented a certificate not trusted here (${e.message}); `
      + "give `ca` (or JOBYARD_CA_CERT) the CA that signed it";
  }
  return e;
}

/** A path segment with everything but unreserved characters percent-encoded. */
export const seg = (s) => encodeURIComponent(String(s));
