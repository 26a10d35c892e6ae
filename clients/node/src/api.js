// One JSON request to jobyard's HTTP API. Everything else in the package goes through
// here, so the URL, the error shape and cancellation are handled once.

import { JobyardError } from "./errors.js";

/** Talks to one jobyard HTTP listener (`url` like "http://127.0.0.1:8080"). */
export class Api {
  constructor(url) {
    if (typeof url !== "string" || !/^https?:\/\/[^/]+/.test(url)) {
      throw new TypeError(`jobyard url must be like "http://127.0.0.1:8080", got ${url}`);
    }
    this.base = url.replace(/\/+$/, "");
  }

  /** Sends `body` as JSON; resolves to the reply's JSON or rejects with JobyardError. */
  async call(method, path, body, signal) {
    const response = await fetch(this.base + path, {
      method,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
    const text = await response.text();
    let json;
    try {
      json = text ? JSON.parse(text) : {};
    } catch {
      throw new JobyardError(response.status, "not_json", text.slice(0, 200));
    }
    if (!response.ok) {
      const error = json.error ?? {};
      throw new JobyardError(response.status, error.code ?? "unknown", error.message ?? text);
    }
    return json;
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
}

/** A path segment with everything but unreserved characters percent-encoded. */
export const seg = (s) => encodeURIComponent(String(s));
