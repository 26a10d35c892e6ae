// The package's own HTTP/1.1 transport (src/transport.js) against scripted servers that
// send replies the way a real server or proxy may: split anywhere, chunked, closing,
// oversized, malformed. And one flow end to end through node:http (`transport: "node"`),
// so both paths stay tested against the real server.

import { test, after } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { spawn } from "node:child_process";

import { HttpTransport, MAX_HEAD_BYTES, Reply, TransportError } from "../src/transport.js";
import { Api } from "../src/api.js";
import { QueuesClient } from "../src/index.js";
import { startServer, eventually } from "./server.js";

const servers = [];
after(() => {
  for (const s of servers) s.close();
});

/** A server that hands each whole request head (and body) to `onRequest(socket, text, n)`,
 * n counting requests per connection; `connections` counts connections accepted. */
async function scripted(onRequest) {
  const state = { connections: 0, sockets: [] };
  const server = net.createServer((socket) => {
    state.connections++;
    state.sockets.push(socket);
    let buf = "";
    let n = 0;
    socket.on("error", () => {});
    socket.on("data", (d) => {
      buf += d.toString("latin1");
      for (;;) {
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) return;
        const length = Number(/content-length: (\d+)/i.exec(buf.slice(0, end))?.[1] ?? 0);
        if (buf.length < end + 4 + length) return;
        const text = buf.slice(0, end + 4 + length);
        buf = buf.slice(end + 4 + length);
        onRequest(socket, text, n++);
      }
    });
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  servers.push(server);
  const { port } = server.address();
  state.transport = new HttpTransport("127.0.0.1", port, `127.0.0.1:${port}`);
  state.port = port;
  return state;
}

const json = (body, extra = "") => {
  const text = JSON.stringify(body);
  return `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\n${extra}\r\n${text}`;
};

async function writeBytewise(socket, text) {
  for (const byte of Buffer.from(text)) {
    socket.write(Buffer.from([byte]));
    await new Promise((r) => setImmediate(r));
  }
}

test("sends the request line, host, length and body; reads a reply split into single bytes", async () => {
  let seen;
  const s = await scripted((socket, text) => {
    seen = text;
    writeBytewise(socket, json({ ok: "é✓" }));
  });
  const r = await s.transport.request("POST", "/v1/x?a=1", JSON.stringify({ hello: "wörld" }));
  assert.equal(r.status, 200);
  assert.deepEqual(JSON.parse(r.text), { ok: "é✓" });
  assert.match(seen, /^POST \/v1\/x\?a=1 HTTP\/1\.1\r\n/);
  assert.match(seen, new RegExp(`\r\nhost: 127\\.0\\.0\\.1:${s.port}\r\n`));
  assert.match(seen, /\r\ncontent-length: 18\r\n/);
  assert.ok(seen.endsWith('{"hello":"wörld"}'.replace("ö", "\u00c3\u00b6")));
  s.transport.close();
});

/** A small deterministic generator, so a failure repeats. */
function random(seed) {
  let x = seed >>> 0 || 1;
  return (n) => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % n;
  };
}

/** Feeds `bytes` to a Reply in the given pieces: the text it resolved with, or the error. */
function readInPieces(bytes, cuts) {
  let text = null;
  const reply = new Reply("GET", (r) => (text = r.text), () => {});
  let at = 0;
  for (const cut of [...cuts, bytes.length]) {
    if (reply.feed(bytes.subarray(at, cut))) {
      reply.finish();
      return text;
    }
    at = cut;
  }
  return undefined; // waiting for more
}

test("any split of a reply reads the same; damaged replies are a TransportError or a wait, never another throw", () => {
  const next = random(12);
  for (let i = 0; i < 3000; i++) {
    const body = JSON.stringify({ i, s: "é".repeat(next(50)), a: Array.from({ length: next(20) }, () => next(1000)) });
    const bytes = Buffer.from(body);
    let raw;
    if (next(2)) {
      raw = Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\ncontent-length: ${bytes.length}\r\n\r\n`), bytes]);
    } else {
      const parts = [];
      for (let at = 0; at < bytes.length;) {
        const n = Math.min(bytes.length - at, 1 + next(40));
        parts.push(Buffer.from(`${n.toString(16)}\r\n`), bytes.subarray(at, at + n), Buffer.from("\r\n"));
        at += n;
      }
      raw = Buffer.concat([Buffer.from("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"), ...parts, Buffer.from("0\r\n\r\n")]);
    }
    const cuts = Array.from({ length: next(6) }, () => next(raw.length)).sort((a, b) => a - b);
    assert.equal(readInPieces(raw, cuts), body, `reply ${i}`);
    const damaged = Buffer.from(raw);
    for (let k = 0; k <= next(4); k++) damaged[next(damaged.length)] = next(256);
    try {
      readInPieces(damaged, cuts);
    } catch (e) {
      assert.ok(e instanceof TransportError, `reply ${i}: ${e}`);
    }
  }
});

test("keeps the connection for the next request, and opens a new one after connection: close", async () => {
  const s = await scripted((socket, text, n) => {
    socket.write(json({ n }, n === 1 ? "connection: close\r\n" : ""));
  });
  for (let i = 0; i < 3; i++) assert.equal(JSON.parse((await s.transport.request("GET", "/")).text).n, i < 2 ? i : 0);
  assert.equal(s.connections, 2);
  s.transport.close();
});

test("reads chunked bodies with extensions and trailers, split across writes", async () => {
  const s = await scripted(async (socket) => {
    const body = '{"a":[1,2,3],"b":"xyz"}';
    const reply = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
      + `5;ext=1\r\n${body.slice(0, 5)}\r\n` + `${(body.length - 5).toString(16)}\r\n${body.slice(5)}\r\n`
      + "0\r\nx-trailer: yes\r\n\r\n";
    socket.write(reply.slice(0, 40));
    await new Promise((r) => setTimeout(r, 5));
    await writeBytewise(socket, reply.slice(40));
  });
  const r = await s.transport.request("GET", "/");
  assert.deepEqual(JSON.parse(r.text), { a: [1, 2, 3], b: "xyz" });
  // The connection is reusable after the chunked reply.
  const again = await s.transport.request("GET", "/");
  assert.equal(again.status, 200);
  assert.equal(s.connections, 1);
  s.transport.close();
});

test("a reply with no length ends with the connection; 1xx replies before it are skipped", async () => {
  const s = await scripted((socket) => {
    socket.end("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\r\n{\"error\":{}}");
  });
  const r = await s.transport.request("GET", "/");
  assert.equal(r.status, 503);
  assert.equal(r.text, '{"error":{}}');
  s.transport.close();
});

test("bodiless replies (204, empty content-length) resolve with an empty text", async () => {
  const s = await scripted((socket, text, n) => {
    socket.write(n === 0 ? "HTTP/1.1 204 No Content\r\n\r\n" : "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
  });
  assert.equal((await s.transport.request("DELETE", "/a")).text, "");
  assert.equal((await s.transport.request("DELETE", "/b")).text, "");
  assert.equal(s.connections, 1);
  s.transport.close();
});

test("bad replies are clear errors, never a crash, and the connection is not reused", async () => {
  const cases = [
    ["not http", "SSH-2.0-OpenSSH\r\n\r\n", /not an HTTP\/1\.x status line/],
    ["head over the limit", `HTTP/1.1 200 OK\r\nx: ${"a".repeat(MAX_HEAD_BYTES + 10)}\r\n\r\n`, /reply head longer than/],
    ["endless head", `HTTP/1.1 200 OK\r\nx: ${"a".repeat(MAX_HEAD_BYTES + 10)}`, /reply head longer than/],
    ["body over the limit", "HTTP/1.1 200 OK\r\ncontent-length: 999999999999\r\n\r\n", /reply body larger than/],
    ["bad length", "HTTP/1.1 200 OK\r\ncontent-length: 12x\r\n\r\n", /bad content-length/],
    ["two lengths", "HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n", /bad content-length/],
    ["bad header", "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", /malformed reply header/],
    ["bad chunk", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", /bad chunk size line/],
    ["chunk without CRLF", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\naXY", /chunk not followed by CRLF/],
    ["endless chunk line", `HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n${"1".repeat(2000)}`, /chunk line too long/],
    ["other encoding", "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n", /unsupported transfer-encoding/],
    ["compressed chunks", "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n", /unsupported transfer-encoding/],
    ["cut short", "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", /closed the connection before its reply/],
  ];
  for (const [name, bytes, message] of cases) {
    const s = await scripted((socket) => {
      if (name === "cut short") socket.end(bytes);
      else socket.write(bytes);
    });
    await assert.rejects(s.transport.request("GET", "/"), message, name);
    assert.equal(s.transport.idle.length, 0, name);
    s.transport.close();
  }
});

test("bytes past the reply, or with no request out, end the connection", async () => {
  const s = await scripted((socket) => {
    socket.write(json({ ok: 1 }) + "HTTP/1.1 200 OK\r\n");
  });
  assert.equal((await s.transport.request("GET", "/")).status, 200);
  assert.equal(s.transport.idle.length, 0);
  await s.transport.request("GET", "/");
  assert.equal(s.connections, 2);
  s.transport.close();
});

test("a kept connection the server drops unread: a GET is sent again on a new one, a POST fails", async () => {
  const s = await scripted((socket, text, n) => {
    // Every connection answers its first request and drops the second without a reply.
    if (n === 0) socket.write(json({ ok: true }));
    else socket.destroy();
  });
  await s.transport.request("GET", "/");
  assert.deepEqual(JSON.parse((await s.transport.request("GET", "/")).text), { ok: true });
  assert.equal(s.connections, 2);
  await assert.rejects(s.transport.request("POST", "/complete", "{}"), (e) => e.code === "ECONNRESET" && e.staleConnection === true);
  assert.equal(s.connections, 2);
  s.transport.close();
});

test("a kept connection closed by the server while idle is not reused", async () => {
  const s = await scripted((socket) => socket.write(json({ ok: true })));
  await s.transport.request("GET", "/");
  for (const socket of s.sockets) socket.destroy();
  await eventually(() => s.transport.idle.length === 0, "the idle connection to be dropped");
  assert.equal((await s.transport.request("POST", "/", "{}")).status, 200);
  assert.equal(s.connections, 2);
  s.transport.close();
});

test("an aborted request rejects at once and closes its connection", async () => {
  const s = await scripted(() => {});
  const abort = new AbortController();
  const pending = s.transport.request("POST", "/lease", "{}", abort.signal);
  await eventually(() => s.connections === 1, "the request to connect");
  abort.abort();
  await assert.rejects(pending, { name: "AbortError" });
  await assert.rejects(s.transport.request("GET", "/", undefined, abort.signal), { name: "AbortError" });
  assert.equal(s.transport.idle.length, 0);
  s.transport.close();
  await assert.rejects(s.transport.request("GET", "/"), /the client was closed/);
});

test("no server: the error says so, with the system's code", async () => {
  const probe = net.createServer();
  await new Promise((ok) => probe.listen(0, "127.0.0.1", ok));
  const { port } = probe.address();
  await new Promise((ok) => probe.close(ok));
  const t = new HttpTransport("127.0.0.1", port, `127.0.0.1:${port}`);
  await assert.rejects(t.request("GET", "/"), (e) => e.code === "ECONNREFUSED" && /connection to jobyard failed/.test(e.message));
});

test("a server that never accepts: the request fails after the connect timeout", { timeout: 10_000 }, async () => {
  // A listener whose accept queue is full drops further connection attempts unanswered,
  // as an unreachable host does; python3 listens with a backlog of 0 and never accepts.
  const py = spawn("python3", ["-c", [
    "import socket, sys",
    "s = socket.socket()",
    "s.bind(('127.0.0.1', 0))",
    "s.listen(0)",
    "print(s.getsockname()[1], flush=True)",
    "sys.stdin.read()",
  ].join("\n")], { stdio: ["pipe", "pipe", "inherit"] });
  const port = Number(await new Promise((ok) => py.stdout.once("data", (d) => ok(String(d).trim()))));
  const fillers = [];
  try {
    let hung = false;
    while (!hung && fillers.length < 16) {
      const socket = net.connect(port, "127.0.0.1");
      socket.on("error", () => {});
      fillers.push(socket);
      hung = await new Promise((ok) => {
        socket.once("connect", () => ok(false));
        setTimeout(() => ok(true), 200);
      });
    }
    assert.ok(hung, "the accept queue never filled up");
    const t = new HttpTransport("127.0.0.1", port, `127.0.0.1:${port}`, { connectTimeoutMs: 300 });
    await assert.rejects(t.request("POST", "/v1/jobs", "{}"), (e) =>
      e instanceof TransportError && e.code === "ERR_CONNECT_TIMEOUT" && /not connected after 300 ms/.test(e.message));
    assert.equal(t.idle.length, 0);
  } finally {
    for (const socket of fillers) socket.destroy();
    py.stdin.end();
  }
});

test("Api.close drops the kept connections and the client stays usable", async () => {
  const s = await scripted((socket) => socket.write(json({ ok: true })));
  const api = new Api(`http://127.0.0.1:${s.port}`);
  assert.deepEqual(await api.get("/a"), { ok: true });
  api.close();
  assert.deepEqual(await api.get("/b"), { ok: true });
  assert.equal(s.connections, 2);
  api.lean.close();
});

test("Api chooses the transport: lean for http:, node:http when asked, node:https for https:", () => {
  assert.ok(new Api("http://127.0.0.1:1").lean);
  const viaNode = new Api("http://127.0.0.1:1", { transport: "node" });
  assert.equal(viaNode.lean, null);
  assert.ok(viaNode.agent);
  assert.equal(new Api("http://127.0.0.1:1").agent, null);
  assert.equal(new Api("https://127.0.0.1:1").lean, null);
  assert.throws(() => new Api("http://127.0.0.1:1", { transport: "fetch" }), /transport must be/);
});

test("a flow runs end to end through node:http too (transport: \"node\")", async (t) => {
  const server = await startServer();
  t.after(() => server.stop());
  const client = new QueuesClient({
    url: server.url,
    transport: "node",
    declarePresets: false,
    flows: [{ name: "via-node", stages: [{ name: "via-node-a", next: "via-node-b" }, { name: "via-node-b" }] }],
  });
  client.createWorkers("via-node", "via-node-a", async () => ({ a: 1 }), 1, 10, 0.2);
  client.createWorkers("via-node", "via-node-b", async () => ({ b: 2 }), 1, 10, 0.2);
  await client.startAll();
  const id = await client.createJob("via-node", { priority: 1 });
  const done = await eventually(async () => {
    const [j] = await client.getJobs([id], false);
    return j?.done === true && j;
  }, "the flow to be done");
  await client.stopAll();
  await client.disconnect();
  assert.equal(client.api.lean, null);
  assert.equal(done.a, 1);
  assert.equal(done.b, 2);
});
