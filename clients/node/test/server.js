// Starts the real jobyard binary ($JOBYARD_BIN, else the workspace's target/debug/jobyard)
// with only its HTTP listener, on a free port and a fresh data directory.

import { spawn } from "node:child_process";
import https from "node:https";
import { mkdtempSync, rmSync, openSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const binary = process.env.JOBYARD_BIN ?? resolve(here, "../../../target/debug/jobyard");

function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.on("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Whether the listener answers `/metrics` (open even with tokens); `ca` for https:. */
function answers(url, ca) {
  if (!url.startsWith("https:")) return fetch(`${url}/metrics`).then((r) => r.ok);
  return new Promise((ok, fail) => {
    https.get(`${url}/metrics`, { ca, agent: false }, (r) => {
      r.resume();
      ok(r.statusCode === 200);
    }).on("error", fail);
  });
}

/** A running server: `url`, `stop()` (and `kill9()` + `start()` for crash tests).
 * `args` are more `serve` flags; with `tls: { ca }` (the CA of `--http-tls-cert`) the URL is
 * https:. */
export async function startServer({ args = [], tls } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "jobyard-node-"));
  const server = { dir, url: undefined, child: undefined };
  server.start = async () => {
    const port = await freePort();
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("JOBYARD_")));
    const log = openSync(join(dir, "server.log"), "a");
    server.child = spawn(
      binary,
      ["serve", "--data-dir", join(dir, "data"), "--fsync", "always", "--beanstalk-listen", "off",
        "--gearman-listen", "off", "--http-listen", `127.0.0.1:${port}`, ...args],
      { env: { ...env, JOBYARD_LOG: "info" }, stdio: ["ignore", log, log] },
    );
    server.url = `${tls ? "https" : "http"}://127.0.0.1:${port}`;
    const deadline = Date.now() + 60000;
    while (Date.now() < deadline) {
      if (server.child.exitCode !== null) throw new Error(`jobyard exited ${server.child.exitCode}; see ${dir}/server.log`);
      try {
        if (await answers(server.url, tls?.ca)) return server;
      } catch {}
      await sleep(20);
    }
    throw new Error("jobyard did not start");
  };
  server.kill9 = async () => {
    const exited = new Promise((r) => server.child.once("exit", r));
    server.child.kill("SIGKILL");
    await exited;
  };
  server.stop = async () => {
    if (server.child.exitCode === null) {
      const exited = new Promise((r) => server.child.once("exit", r));
      server.child.kill("SIGTERM");
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  return server.start();
}

/** Polls `check` until it returns a truthy value (bounded: a broken server fails the test). */
export async function eventually(check, what, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}
