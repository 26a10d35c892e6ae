// Where the server is and what it takes to be let in: the URL, the token and the CA, from
// the options or else the environment, read the way `jobyard ctl` and the Python client
// read them (JOBYARD_URL, JOBYARD_TOKEN, JOBYARD_CA_CERT), so one environment serves all.

import { readFileSync } from "node:fs";

/** The server's default HTTP listener, when neither `url` nor JOBYARD_URL is given. */
export const DEFAULT_URL = "http://127.0.0.1:8080";

/** A variable's value, or undefined when unset or empty. */
const fromEnv = (name) => process.env[name] || undefined;

/** `{ url, token, ca }` with what the options leave out taken from the environment.
 * `ca` is PEM text (a string, a Buffer, or an array of them, as node:tls takes it);
 * JOBYARD_CA_CERT names a PEM file, read here. An empty token sends none. */
export function resolveConnection({ url, token, ca } = {}) {
  const resolved = {
    url: url ?? fromEnv("JOBYARD_URL") ?? DEFAULT_URL,
    token: (token ?? fromEnv("JOBYARD_TOKEN")) || undefined,
    ca: ca ?? readCa(fromEnv("JOBYARD_CA_CERT")),
  };
  if (resolved.token !== undefined && !/^[\x21-\x7e]+$/.test(resolved.token)) {
    // Anything else could not travel in a header (or would end it early).
    throw new TypeError("jobyard token must be printable ASCII without spaces");
  }
  return resolved;
}

function readCa(path) {
  if (path === undefined) return undefined;
  try {
    return readFileSync(path);
  } catch (e) {
    throw new Error(`JOBYARD_CA_CERT ${path}: ${e.message}`);
  }
}
