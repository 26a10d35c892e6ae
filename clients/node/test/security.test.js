// The client against a secured server: `serve --http-token-file` (a read and an admin
// token), over HTTPS with a certificate signed by a CA made here with the openssl CLI (as
// docs/security.md shows) and over plain HTTP through the package's own transport.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { QueuesClient, FlowMonitor, createAccessFlow, JobyardError } from "../src/index.js";
import { startServer } from "./server.js";

const ADMIN = "admin-token-0123456789abcdef";
const READ = "read-token-0123456789abcdef";
const FLOW = { name: "guarded", stages: [{ name: "guarded-stage" }] };

const dir = mkdtempSync(join(tmpdir(), "jobyard-node-tls-"));
const path = (name) => join(dir, name);
const openssl = (...args) => execFileSync("openssl", args, { stdio: ["ignore", "ignore", "pipe"] });
const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];

/** A self-signed CA `name`: its PEM path. */
function makeCa(name) {
  openssl("req", "-x509", ...ec, "-keyout", path(`${name}-key.pem`), "-out", path(`${name}.pem`),
    "-days", "2", "-subj", `/CN=jobyard test ${name}`);
  return path(`${name}.pem`);
}

/** A certificate for 127.0.0.1 signed by the CA `ca`. */
function makeServerCert() {
  writeFileSync(path("ext.cnf"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n");
  openssl("req", "-new", ...ec, "-keyout", path("key.pem"), "-out", path("req.pem"), "-subj", "/CN=jobyard test");
  openssl("x509", "-req", "-in", path("req.pem"), "-CA", path("ca.pem"), "-CAkey", path("ca-key.pem"),
    "-CAcreateserial", "-out", path("cert.pem"), "-days", "2", "-extfile", path("ext.cnf"));
}

let ca;
let secure; // HTTPS and tokens
let plain; // plain HTTP and tokens
before(async () => {
  makeCa("ca");
  makeServerCert();
  ca = readFileSync(path("ca.pem"));
  writeFileSync(path("tokens"), `admin ${ADMIN}\nread ${READ}\n`);
  const tokens = ["--http-token-file", path("tokens")];
  secure = await startServer({
    args: [...tokens, "--http-tls-cert", path("cert.pem"), "--http-tls-key", path("key.pem")],
    tls: { ca },
  });
  plain = await startServer({ args: tokens });
});
after(async () => {
  await secure?.stop();
  await plain?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A client of `server` with `token`, trusting the test CA; flows declared by hand. */
const clientOf = (server, token, options = {}) =>
  new QueuesClient({ url: server.url, token, ca, declarePresets: false, flows: [FLOW], ...options });

/** Asserts that `promise` rejects with a JobyardError of this status and code. */
async function refused(promise, status, code) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof JobyardError, `${e}`);
    assert.equal(e.status, status);
    assert.equal(e.code, code);
    return true;
  });
}

for (const [name, server, transport] of [
  ["https (node:https)", () => secure, undefined],
  ["http (the package's transport)", () => plain, undefined],
  ["http (node:http)", () => plain, "node"],
]) {
  test(`${name}: an admin token creates and reads`, async () => {
    const admin = clientOf(server(), ADMIN, { transport });
    await admin.connect();
    const id = await admin.createJob("guarded", { owner: "admin" });
    const [job] = await admin.getJobs([id]);
    assert.equal(job.owner, "admin");
    admin.api.close();
  });

  test(`${name}: a read token reads but cannot create`, async () => {
    const admin = clientOf(server(), ADMIN, { transport });
    await admin.connect();
    const id = await admin.createJob("guarded", { owner: "admin" });
    const reader = clientOf(server(), READ, { transport });
    const [job] = await reader.getJobs([id]);
    assert.equal(job.id, id);
    await refused(reader.createJob("guarded", {}), 403, "forbidden");
    await refused(reader.connect(), 403, "forbidden"); // declaring a flow is an action
    admin.api.close();
    reader.api.close();
  });

  test(`${name}: a wrong or missing token is refused`, async () => {
    await refused(clientOf(server(), "not-a-configured-token-000", { transport }).getJobs(["guarded:x"]), 401, "bad_token");
    await refused(clientOf(server(), "", { transport }).getJobs(["guarded:x"]), 401, "auth_required");
  });
}

test("a certificate from another CA is a clear TLS error", async () => {
  const otherCa = readFileSync(makeCa("other-ca"));
  const client = clientOf(secure, ADMIN, { ca: otherCa });
  await assert.rejects(client.getJobs(["guarded:x"]), (e) => {
    assert.match(e.message, /^TLS: https:\/\/127\.0\.0\.1:\d+ presented a certificate not trusted here/);
    assert.match(e.message, /give `ca`/);
    assert.match(e.code, /CERT|SELF_SIGNED|UNABLE_TO/);
    return true;
  });
  // Node's built-in roots do not know the test CA either.
  await assert.rejects(clientOf(secure, ADMIN, { ca: undefined }).getJobs(["guarded:x"]), /^Error: TLS: /);
});

test("FlowMonitor and the per-flow API take token and ca too", async () => {
  const flow = createAccessFlow({ url: secure.url, token: ADMIN, ca });
  const id = await flow.createJob({ priority: 1, userId: 1, guildId: 2, roleIds: [3] });
  assert.match(id, /^access:/);
  const monitor = new FlowMonitor({ url: secure.url, token: READ, ca, intervalMs: 50 });
  await monitor.start();
  await monitor.stop();
  const queue = monitor.jobsInQueues.find((q) => q.queueName === "access-preparation");
  assert.ok(queue.priorities[1].waiting.includes(id));
});

test("url, token and ca default to JOBYARD_URL, JOBYARD_TOKEN and JOBYARD_CA_CERT", async () => {
  const saved = { ...process.env };
  try {
    process.env.JOBYARD_URL = secure.url;
    process.env.JOBYARD_TOKEN = READ;
    process.env.JOBYARD_CA_CERT = path("ca.pem");
    const fromEnv = new QueuesClient({ declarePresets: false });
    await fromEnv.getJobs(["guarded:x"]);
    await refused(fromEnv.createJob("guarded", {}), 403, "forbidden");
    // What the options give wins over the environment.
    const given = new QueuesClient({ url: plain.url, token: ADMIN, flows: [FLOW], declarePresets: false });
    await given.connect();
    assert.match(await given.createJob("guarded", {}), /^guarded:/);
    process.env.JOBYARD_CA_CERT = path("missing.pem");
    assert.throws(() => new QueuesClient(), /JOBYARD_CA_CERT .*missing\.pem/);
  } finally {
    for (const name of ["JOBYARD_URL", "JOBYARD_TOKEN", "JOBYARD_CA_CERT"]) {
      if (name in saved) process.env[name] = saved[name];
      else delete process.env[name];
    }
  }
});

test("a token that could not travel in a header is refused at construction", () => {
  assert.throws(() => new QueuesClient({ url: plain.url, token: "abc\r\nx-evil: 1" }), /printable ASCII/);
});
