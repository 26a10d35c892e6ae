// The client's HTTP/1.1 for plain http: URLs: requests on kept connections over node:net,
// with a reply reader written for what jobyard sends (small JSON bodies).
//
// Why not node:http: a worker at a moderate rate spends most of its time in node:http's
// general machinery (streams, agent bookkeeping, socket timers, listeners added and
// removed per request), and V8 keeps compiling that code for minutes after a process
// starts. Measured in docs/benchmarks.md ("Flows", "The Node client's transport"): the
// flow benchmark at 10 flows/s took about 4.4 ms of the Node process's CPU per flow
// through node:http and about 2.1 ms through this, and the create→done tail fell with it.
// https: URLs, and `transport: "node"`, still go through node:http(s). undici's Pool,
// measured beside it in bench/flows (issue 28), cost about twice its CPU per request.
//
// Reads skip net.Socket's stream machinery (`onread`), which saved another 7 % of the
// client's CPU per request in the request ceiling of bench/flows/bench.mjs.
//
// Everything read from the server is bounded: the reply head, a chunk-size line, the body.
// So are the connections: at most `maxSockets` to the server, and requests beyond them wait
// in line for the next one free. Without a bound a burst of calls (a Promise.all over a few
// hundred ids) opens a connection each, and connects past the listener's accept queue are
// dropped and retried by the kernel a second later.

import net from "node:net";

/** Longest reply head (status line and headers) read before giving up on the reply. */
export const MAX_HEAD_BYTES = 64 * 1024;
/** Largest reply body: far above any jobyard reply, small enough to stay a string. */
export const MAX_BODY_BYTES = 256 * 1024 * 1024;
/** Longest chunk-size line of a chunked body (size, extensions, CRLF). */
const MAX_CHUNK_LINE_BYTES = 1024;
/** A kept connection idle longer than this is closed rather than reused: a proxy or the
 * server may have cut it. */
const IDLE_REUSE_MS = 30_000;
/** How long a new connection may take to be accepted. Without it a server that is
 * unreachable without refusing (a dropped route, a full accept queue) holds a request for
 * the operating system's own connect timeout, about two minutes on Linux. Long enough
 * for any link a job server is used over. */
export const CONNECT_TIMEOUT_MS = 10_000;
/** Connections to the server when the caller does not say: enough for the calls an
 * application makes at once, well within a listener's accept queue. A client that runs
 * workers adds one per worker (each holds a connection through its long poll). */
export const DEFAULT_MAX_SOCKETS = 64;

const CRLF = Buffer.from("\r\n");
const HEAD_END = Buffer.from("\r\n\r\n");
const IDEMPOTENT = new Set(["GET", "HEAD", "DELETE", "PUT", "OPTIONS"]);
/** Where every connection's reads land (`onread`): bytes go from the socket to the reply
 * reader without a stream's buffering and events. Each read is copied out at once, so
 * one buffer serves all connections. */
const readBuffer = Buffer.allocUnsafe(64 * 1024);

/** An error of the connection or of a reply that is not HTTP/1.1 as expected. */
export class TransportError extends Error {
  constructor(code, message) {
    super(message);
    this.name = "TransportError";
    this.code = code;
  }
}

/** Requests to one host and port, on at most `maxSockets` connections, kept and reused
 * (most recent first); further requests wait for one in the order they came.
 * `authorization` (e.g. "Bearer <token>") is sent with every request. */
export class HttpTransport {
  constructor(hostname, port, hostHeader, { connectTimeoutMs = CONNECT_TIMEOUT_MS, authorization, maxSockets = DEFAULT_MAX_SOCKETS } = {}) {
    if (!Number.isInteger(maxSockets) || maxSockets < 1) {
      throw new TypeError(`maxSockets must be a whole number of at least 1, got ${maxSockets}`);
    }
    this.hostname = hostname;
    this.port = port;
    this.hostHeader = hostHeader;
    // The head's fixed lines, built once: every request carries them.
    this.fixedHeaders = `host: ${hostHeader}\r\naccept: application/json\r\n`
      + (authorization === undefined ? "" : `authorization: ${authorization}\r\n`);
    this.connectTimeoutMs = connectTimeoutMs;
    this.maxSockets = maxSockets;
    /** Connections open or opening, busy or idle. */
    this.connections = 0;
    this.idle = [];
    /** Requests waiting for a connection, first come first served. */
    this.waiting = [];
    this.closed = false;
  }

  /** Sends one request; resolves to `{ status, text }` once the whole reply is read.
   * `payload` is a JSON string or undefined. */
  request(method, path, payload, signal) {
    if (this.closed) return Promise.reject(new TransportError("ERR_CLOSED", "the client was closed"));
    if (signal?.aborted) return Promise.reject(abortError());
    let head = `${method} ${path} HTTP/1.1\r\n${this.fixedHeaders}`;
    if (payload !== undefined) {
      head += `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(payload)}\r\n`;
    } else if (method !== "GET" && method !== "HEAD") {
      head += "content-length: 0\r\n";
    }
    const bytes = head + "\r\n" + (payload ?? "");
    return this.send(method, bytes, signal, true);
  }

  send(method, bytes, signal, mayRetry) {
    const conn = this.take();
    const sent = conn ? exchange(conn, method, bytes, signal) : this.wait(method, bytes, signal);
    return sent.catch((e) => {
      // A kept connection the server closed just as it was reused: the request never
      // reached it. Sent again on a fresh connection only when repeating it is harmless.
      if (mayRetry && e.staleConnection && IDEMPOTENT.has(method) && !this.closed) {
        return this.send(method, bytes, signal, false);
      }
      throw e;
    });
  }

  /** A kept connection still open and not idle too long, or a new one while there are
   * fewer than `maxSockets`; null when every connection is busy. */
  take() {
    const now = Date.now();
    while (this.idle.length) {
      const conn = this.idle.pop();
      if (conn.open && now - conn.idleSince <= IDLE_REUSE_MS) {
        conn.socket.ref();
        conn.reused = true;
        return conn;
      }
      conn.destroy();
    }
    return this.connections < this.maxSockets ? this.connect() : null;
  }

  connect() {
    this.connections++;
    return new Connection(this);
  }

  /** A request in line for a connection; an abort takes it out of the line. */
  wait(method, bytes, signal) {
    return new Promise((resolve, reject) => {
      const waiter = { method, bytes, signal, resolve, reject, unlisten: null };
      if (signal) {
        const onAbort = () => {
          const i = this.waiting.indexOf(waiter);
          if (i >= 0) this.waiting.splice(i, 1);
          reject(abortError());
        };
        signal.addEventListener("abort", onAbort, { once: true });
        waiter.unlisten = () => signal.removeEventListener("abort", onAbort);
      }
      this.waiting.push(waiter);
    });
  }

  /** Sends the first request in line on `conn`. */
  handTo(conn) {
    const waiter = this.waiting.shift();
    waiter.unlisten?.();
    exchange(conn, waiter.method, waiter.bytes, waiter.signal).then(waiter.resolve, waiter.reject);
  }

  /** Called by a connection whose reply was read whole and may carry another request. */
  release(conn) {
    if (this.closed) return conn.destroy();
    if (this.waiting.length) {
      conn.reused = true;
      return this.handTo(conn);
    }
    conn.idleSince = Date.now();
    // An idle kept connection does not keep the process alive (node:http's agent does
    // the same).
    conn.socket.unref();
    this.idle.push(conn);
  }

  /** Called once by a connection that closed: its place goes to the first request in line. */
  forget(conn) {
    const i = this.idle.indexOf(conn);
    if (i >= 0) this.idle.splice(i, 1);
    this.connections--;
    if (this.waiting.length && !this.closed && this.connections < this.maxSockets) {
      this.handTo(this.connect());
    }
  }

  /** Closes the kept idle connections; later requests open new ones. */
  dropIdle() {
    for (const conn of this.idle.splice(0)) conn.destroy();
  }

  /** Closes the kept connections for good: later requests fail, and a connection still
   * carrying a request is closed once its reply is read. */
  close() {
    this.closed = true;
    this.dropIdle();
    for (const waiter of this.waiting.splice(0)) {
      waiter.unlisten?.();
      waiter.reject(new TransportError("ERR_CLOSED", "the client was closed"));
    }
  }
}

/** Sends `bytes` on `conn`; resolves to the reply. */
function exchange(conn, method, bytes, signal) {
  return new Promise((resolve, reject) => {
    conn.start(method, resolve, reject, signal);
    conn.socket.write(bytes);
  });
}

/** One TCP connection and the reply it is reading, if any. */
class Connection {
  constructor(transport) {
    this.transport = transport;
    this.open = true;
    /** Whether it still holds one of the transport's `maxSockets` places. */
    this.counted = true;
    this.reused = false;
    this.idleSince = 0;
    this.reply = null;
    this.socket = net.connect({
      port: transport.port,
      host: transport.hostname,
      onread: { buffer: readBuffer, callback: (n, buf) => this.onData(Buffer.from(buf.subarray(0, n))) },
    });
    this.socket.setNoDelay(true);
    const connectTimer = setTimeout(() => {
      const e = new Error(`not connected after ${transport.connectTimeoutMs} ms`);
      e.code = "ERR_CONNECT_TIMEOUT";
      this.socket.destroy(e);
    }, transport.connectTimeoutMs);
    connectTimer.unref();
    this.socket.once("connect", () => clearTimeout(connectTimer));
    this.socket.once("close", () => clearTimeout(connectTimer));
    this.socket.on("error", (e) => this.onGone(e));
    this.socket.on("close", () => this.onGone(null));
  }

  start(method, resolve, reject, signal) {
    this.reply = new Reply(method, resolve, reject);
    if (signal) {
      const onAbort = () => {
        this.fail(abortError());
        this.destroy();
      };
      signal.addEventListener("abort", onAbort, { once: true });
      this.reply.unlisten = () => signal.removeEventListener("abort", onAbort);
    }
  }

  onData(chunk) {
    const reply = this.reply;
    if (!reply) {
      // Bytes with no request outstanding: the connection can no longer be trusted.
      this.destroy();
      return;
    }
    let done;
    try {
      done = reply.feed(chunk);
    } catch (e) {
      this.fail(e);
      this.destroy();
      return;
    }
    if (!done) return;
    this.reply = null;
    reply.finish();
    if (reply.keepAlive && !reply.trailing) this.transport.release(this);
    else this.destroy();
  }

  onGone(error) {
    this.open = false;
    this.leave();
    const reply = this.reply;
    if (!reply) return;
    // A reply without a length ends where the connection does.
    if (!error && reply.untilClose && reply.headDone) {
      this.reply = null;
      reply.finish();
      return;
    }
    const e = new TransportError(
      error?.code ?? "ECONNRESET",
      error ? `connection to jobyard failed: ${error.message}` : "jobyard closed the connection before its reply",
    );
    e.staleConnection = this.reused && reply.received === 0;
    this.fail(e);
  }

  fail(e) {
    const reply = this.reply;
    if (!reply) return;
    this.reply = null;
    reply.unlisten?.();
    reply.reject(e);
  }

  destroy() {
    this.open = false;
    this.leave();
    this.socket.destroy();
  }

  /** Gives its place back to the transport, once (a socket reports an error and a close). */
  leave() {
    if (!this.counted) return;
    this.counted = false;
    this.transport.forget(this);
  }
}

/** The reader of one reply: head, then a body by content-length, chunks, or until close.
 * Exported for the tests, which feed it split and damaged replies. */
export class Reply {
  constructor(method, resolve, reject) {
    this.method = method;
    this.resolve = resolve;
    this.reject = reject;
    this.unlisten = null;
    this.received = 0;
    this.pending = null; // bytes read and not yet used
    this.headDone = false;
    this.status = 0;
    this.keepAlive = true;
    this.length = -1; // body bytes still expected (content-length)
    this.chunked = false;
    this.chunkLeft = -1; // -1: a size line is next; -2: the CRLF after a chunk; -3: trailers
    this.untilClose = false;
    this.body = [];
    this.bodyBytes = 0;
    this.trailing = false; // bytes past the end of the reply
  }

  /** Takes the next bytes; true once the reply is whole. */
  feed(chunk) {
    this.received += chunk.length;
    let buf = this.pending ? Buffer.concat([this.pending, chunk]) : chunk;
    this.pending = null;
    if (!this.headDone) {
      buf = this.readHead(buf);
      if (buf === null) return false;
      if (this.isDone(buf)) return true;
    }
    return this.readBody(buf);
  }

  /** Parses the head if it is all here; the bytes after it, or null (waiting for more). */
  readHead(buf) {
    for (;;) {
      const end = buf.indexOf(HEAD_END);
      if (end < 0) {
        if (buf.length > MAX_HEAD_BYTES) throw headTooLong();
        this.pending = buf;
        return null;
      }
      if (end > MAX_HEAD_BYTES) throw headTooLong();
      const lines = buf.toString("latin1", 0, end).split("\r\n");
      const status = /^HTTP\/1\.([01]) (\d{3})(?: |$)/.exec(lines[0]);
      if (!status) throw new TransportError("ERR_REPLY_HEAD", `not an HTTP/1.x status line: ${JSON.stringify(lines[0].slice(0, 80))}`);
      buf = buf.subarray(end + 4);
      const code = Number(status[2]);
      // 1xx replies (100 Continue, 103 Early Hints) come before the real one.
      if (code >= 100 && code < 200 && code !== 101) continue;
      this.status = code;
      this.keepAlive = status[1] === "1";
      this.readHeaders(lines);
      this.headDone = true;
      return buf;
    }
  }

  readHeaders(lines) {
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i];
      const colon = line.indexOf(":");
      if (colon <= 0) throw new TransportError("ERR_REPLY_HEAD", `malformed reply header: ${JSON.stringify(line.slice(0, 80))}`);
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim().toLowerCase();
      if (name === "content-length") {
        if (!/^\d{1,15}$/.test(value) || (this.length >= 0 && this.length !== Number(value))) {
          throw new TransportError("ERR_REPLY_HEAD", `bad content-length: ${JSON.stringify(value)}`);
        }
        this.length = Number(value);
      } else if (name === "transfer-encoding") {
        // Only plain chunked: the client asks for no compression, so it reads none.
        if (value !== "chunked") {
          throw new TransportError("ERR_REPLY_HEAD", `unsupported transfer-encoding: ${value}`);
        }
        this.chunked = true;
      } else if (name === "connection") {
        const tokens = value.split(",").map((t) => t.trim());
        if (tokens.includes("close")) this.keepAlive = false;
        else if (tokens.includes("keep-alive")) this.keepAlive = true;
      }
    }
    if (this.chunked) this.length = -1;
    if (this.length > MAX_BODY_BYTES) throw tooLarge();
  }

  /** True when the reply has no body (or an empty one) and ends with its head. */
  isDone(rest) {
    const bodiless = this.method === "HEAD" || this.status === 204 || this.status === 304;
    if (bodiless || this.length === 0) {
      this.trailing = rest.length > 0;
      return true;
    }
    if (!this.chunked && this.length < 0) {
      this.untilClose = true;
      this.keepAlive = false;
    }
    return false;
  }

  /** Takes body bytes; true once the body is whole. */
  readBody(buf) {
    if (this.chunked) return this.readChunks(buf);
    if (this.untilClose) {
      this.append(buf);
      return false;
    }
    if (buf.length >= this.length) {
      this.append(buf.subarray(0, this.length));
      this.trailing = buf.length > this.length;
      this.length = 0;
      return true;
    }
    this.append(buf);
    this.length -= buf.length;
    return false;
  }

  readChunks(buf) {
    while (buf.length) {
      if (this.chunkLeft === -1 || this.chunkLeft === -3) {
        const eol = buf.indexOf(CRLF);
        if (eol < 0) {
          if (buf.length > MAX_CHUNK_LINE_BYTES) throw new TransportError("ERR_REPLY_BODY", "chunk line too long");
          this.pending = buf;
          return false;
        }
        const line = buf.toString("latin1", 0, eol);
        buf = buf.subarray(eol + 2);
        if (this.chunkLeft === -3) {
          // Trailers end with an empty line.
          if (line === "") {
            this.trailing = buf.length > 0;
            return true;
          }
          continue;
        }
        const size = /^([0-9a-fA-F]{1,8})(?:[ \t]*;.*)?$/.exec(line);
        if (!size) throw new TransportError("ERR_REPLY_BODY", `bad chunk size line: ${JSON.stringify(line.slice(0, 40))}`);
        const n = parseInt(size[1], 16);
        this.chunkLeft = n === 0 ? -3 : n;
        continue;
      }
      if (this.chunkLeft === -2) {
        if (buf.length < 2) {
          this.pending = buf;
          return false;
        }
        if (buf[0] !== 13 || buf[1] !== 10) throw new TransportError("ERR_REPLY_BODY", "chunk not followed by CRLF");
        buf = buf.subarray(2);
        this.chunkLeft = -1;
        continue;
      }
      const take = Math.min(this.chunkLeft, buf.length);
      this.append(buf.subarray(0, take));
      buf = buf.subarray(take);
      this.chunkLeft -= take;
      if (this.chunkLeft === 0) this.chunkLeft = -2;
    }
    return false;
  }

  append(bytes) {
    if (!bytes.length) return;
    this.bodyBytes += bytes.length;
    if (this.bodyBytes > MAX_BODY_BYTES) throw tooLarge();
    this.body.push(bytes);
  }

  finish() {
    this.unlisten?.();
    const body = this.body;
    const text = body.length === 0 ? "" : body.length === 1 ? body[0].toString() : Buffer.concat(body).toString();
    this.resolve({ status: this.status, text });
  }
}

const headTooLong = () => new TransportError("ERR_REPLY_HEAD", `reply head longer than ${MAX_HEAD_BYTES} bytes`);
const tooLarge = () => new TransportError("ERR_REPLY_BODY", `reply body larger than ${MAX_BODY_BYTES} bytes`);

/** The error an aborted request rejects with (the same name fetch and node:http use). */
function abortError() {
  const e = new Error("the request was aborted");
  e.name = "AbortError";
  e.code = "ABORT_ERR";
  return e;
}
