// How many connections the client opens: bounded per server on both transports, reused,
// and one lookup request for a getJobs of many ids, so a burst of calls never opens more
// connections than a listener's accept queue takes (a dropped connect is retried by the
// kernel only a second later). Asserted on connections counted where they are accepted,
// never on how long anything took.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";

import { HttpTransport } from "../src/transport.js";
import { Api } from "../src/api.js";
import { LOOKUP_MAX_IDS } from "../src/client.js";
import { QueuesClient } from "../src/index.js";
import { startServer } from "./server.js";

const listeners = [];
let server;
before(async () => {
  server = await startServer();
});
after(async () => {
  for (const l of listeners) l.close();
  await server?.stop();
});

/** Starts `server` on a free loopback port; its port. */
async function listen(tcp) {
  await new Promise((ok) => tcp.listen(0, "127.0.0.1", ok));
  listeners.push(tcp);
  return tcp.address().port;
}

/** Counts a listener's connections (`accepted`) and keeps the open ones (`sockets`). */
function counter() {
  const counts = { accepted: 0, sockets: new Set() };
  counts.opened = (socket) => {
    counts.accepted++;
    counts.sockets.add(socket);
    socket.on("error", () => {});
    socket.once("close", () => counts.sockets.delete(socket));
  };
  return counts;
}

/** A server answering each request with its own path as JSON, after `hold(reply)` lets it
 * (at once by default); `close: true` ends each connection after its reply. */
async function echo({ hold = (reply) => reply(), close = false } = {}) {
  const counts = counter();
  const tcp = net.createServer((socket) => {
    counts.opened(socket);
    let buf = "";
    socket.on("data", (d) => {
      buf += d.toString("latin1");
      for (let end = buf.indexOf("\r\n\r\n"); end >= 0; end = buf.indexOf("\r\n\r\n")) {
        const path = buf.slice(0, end).split(" ")[1];
        buf = buf.slice(end + 4);
        hold(() => {
          const text = JSON.stringify({ path });
          const connection = close ? "connection: close\r\n" : "";
          socket.write(`HTTP/1.1 200 OK\r\ncontent-length: ${text.length}\r\n${connection}\r\n${text}`);
          if (close) socket.end();
        });
      }
    });
  });
  const port = await listen(tcp);
  counts.port = port;
  counts.transport = (options) => new HttpTransport("127.0.0.1", port, `127.0.0.1:${port}`, options);
  return counts;
}

/** A TCP proxy in front of the real server that counts the connections it accepts. */
async function countingProxy() {
  const counts = counter();
  const target = new URL(server.url);
  const tcp = net.createServer((socket) => {
    counts.opened(socket);
    const upstream = net.connect(Number(target.port), target.hostname);
    upstream.on("error", () => socket.destroy());
    socket.on("close", () => upstream.destroy());
    upstream.on("close", () => socket.destroy());
    socket.pipe(upstream);
    upstream.pipe(socket);
  });
  counts.url = `http://127.0.0.1:${await listen(tcp)}`;
  return counts;
}

const paths = (n) => Array.from({ length: n }, (_, i) => `/r/${i}`);

test("the transport opens at most maxSockets connections and reuses them for the rest", async () => {
  const s = await echo();
  const transport = s.transport({ maxSockets: 4 });
  const replies = await Promise.all(paths(200).map((p) => transport.request("GET", p)));
  assert.deepEqual(replies.map((r) => JSON.parse(r.text).path), paths(200), "each reply is its own request's");
  assert.ok(s.accepted <= 4, `${s.accepted} connections accepted`);
  transport.close();
});

test("a request in line takes the place of a connection the server closed", async () => {
  // The server may see a closed connection's end after the next one's start, so the
  // connections open at once are the client's own count, taken as each request arrives.
  let transport;
  let mostOpen = 0;
  const s = await echo({
    close: true,
    hold: (reply) => {
      mostOpen = Math.max(mostOpen, transport.connections);
      reply();
    },
  });
  transport = s.transport({ maxSockets: 3 });
  const replies = await Promise.all(paths(30).map((p) => transport.request("GET", p)));
  assert.deepEqual(replies.map((r) => JSON.parse(r.text).path), paths(30));
  assert.equal(s.accepted, 30, "one connection per reply: the server closed each");
  assert.ok(mostOpen <= 3, `${mostOpen} connections open at once`);
  transport.close();
});

test("an aborted request leaves the line; close() fails the ones still in it", async () => {
  const held = [];
  const s = await echo({ hold: (reply) => held.push(reply) });
  const transport = s.transport({ maxSockets: 1 });
  const first = transport.request("GET", "/first");
  const abort = new AbortController();
  const aborted = transport.request("GET", "/aborted", undefined, abort.signal);
  const third = transport.request("GET", "/third");
  abort.abort();
  await assert.rejects(aborted, { name: "AbortError" });
  while (held.length === 0) await new Promise((r) => setImmediate(r));
  held.shift()();
  assert.equal(JSON.parse((await first).text).path, "/first");
  while (held.length === 0) await new Promise((r) => setImmediate(r));
  held.shift()();
  assert.equal(JSON.parse((await third).text).path, "/third", "the aborted request was never sent");
  assert.equal(s.accepted, 1);
  const waiting = [transport.request("GET", "/a"), transport.request("GET", "/b")];
  transport.close();
  await assert.rejects(waiting[1], { code: "ERR_CLOSED" });
  for (const socket of s.sockets) socket.destroy();
  await assert.rejects(waiting[0]);
});

test("through node:http the agent holds to maxSockets too", async () => {
  const s = await echo();
  const api = new Api(`http://127.0.0.1:${s.port}`, { transport: "node", maxSockets: 3 });
  const replies = await Promise.all(paths(60).map((p) => api.get(p)));
  assert.deepEqual(replies.map((r) => r.path), paths(60));
  assert.ok(s.accepted <= 3, `${s.accepted} connections accepted`);
  api.close();
});

test("workers add a connection each to the bound", () => {
  for (const transport of ["lean", "node"]) {
    const client = new QueuesClient({ url: "http://127.0.0.1:9", maxSockets: 2, transport });
    client.createWorkers("messaging", "send-message", async () => ({}), 3);
    const bound = transport === "lean" ? client.api.lean.maxSockets : client.api.agent.maxSockets;
    assert.equal(bound, 5, transport);
    client.api.close();
  }
});

/** Creates `n` jobs in the flow `many` through `client`; their ids. */
async function manyJobs(client, n) {
  await client.declareFlow({ name: "many", stages: [{ name: "many-only" }] });
  return Promise.all(Array.from({ length: n }, (_, i) => client.createJob("many", { n: i })));
}

for (const transport of ["lean", "node"]) {
  test(`getJobs of 400 ids is one request on one connection (${transport})`, async () => {
    const proxy = await countingProxy();
    const maker = new QueuesClient({ url: proxy.url, declarePresets: false, transport });
    const ids = await manyJobs(maker, 400);
    assert.ok(proxy.accepted <= 64, `creating 400 jobs opened ${proxy.accepted} connections`);
    maker.api.close();

    const before = proxy.accepted;
    const client = new QueuesClient({ url: proxy.url, declarePresets: false, transport });
    const asked = [...ids.slice(200), "many:missing", ...ids.slice(0, 200)];
    const jobs = await client.getJobs(asked, false, ["n"]);
    assert.equal(proxy.accepted - before, 1, "a first getJobs of 400 ids opens one connection");
    assert.deepEqual(jobs.map((j) => j.id), asked.filter((id) => id !== "many:missing"));
    assert.deepEqual(jobs[0], { id: ids[200], n: 200 });

    const repeated = [...ids, ...ids, ...ids];
    const all = await client.getJobs(repeated);
    assert.deepEqual(all.map((j) => j.id), repeated, "more than one lookup's worth, in order");
    const requests = Math.ceil(repeated.length / LOOKUP_MAX_IDS);
    assert.ok(proxy.accepted - before <= requests, `${proxy.accepted - before} connections for ${requests} lookups`);
    client.api.close();
  });
}
