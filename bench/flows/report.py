#!/usr/bin/env python3
"""Markdown table of bench/flows/run.sh's JSON lines, with the Redis library's figures from
issue 12 (measured earlier on this machine: Redis 7, 4 workers per queue) as the anchor,
and the Node process's request ceiling measured in the same run."""

import json
import sys

# Guild Queues on Redis (issue 12): flows/s at saturation, create→done p50/p99 ms at 10/s.
ANCHOR = {"linear": (37.5, 310, 317), "fanout": (3.5, 1600, 1800)}


def cell(value, fmt="{}"):
    return "–" if value is None else fmt.format(value)


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip().startswith("{")]
    print("| shape | client | saturated flows/s | × Redis lib | server CPU ms/flow "
          "| client CPU ms/flow | requests/flow | create→done p50 / p99 ms at 10/s (flows) "
          "| warm-up p50 / p99 ms | Redis lib p50 / p99 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for shape in ("linear", "fanout"):
        for client in ("rust", "node"):
            sat = next((r for r in rows if r["shape"] == shape and r["client"] == client
                        and r["mode"] == "saturated"), None)
            fixed = next((r for r in rows if r["shape"] == shape and r["client"] == client
                          and r["mode"] == "fixed"
                          and r.get("helper_threads", "default") == "default"), None)
            if not sat or not fixed:
                continue
            base, p50, p99 = ANCHOR[shape]
            cold = (f"{fixed['cold_p50_ms']} / {fixed['cold_p99_ms']}" if "cold_p99_ms" in fixed
                    else "–")
            print(f"| {shape} | {client} | {sat['flows_per_s']:,.0f} | {sat['flows_per_s'] / base:,.0f}× "
                  f"| {cell(sat['server_cpu_ms_per_flow'])} | {cell(sat.get('node_cpu_ms_per_flow'))} "
                  f"| {cell(sat.get('requests_per_flow'))} "
                  f"| {fixed['p50_ms']} / {fixed['p99_ms']} ({fixed['flows']}) | {cold} | {p50} / {p99} |")
    print()
    print("Linear: 3 stages; fanout: 3 stages, the middle one fanning out to 3 children (the"
          " Redis anchor is its fan-out of 2). 4 workers per stage, trivial handlers, fsync always."
          " Client CPU is the Node process's own (the Rust bench does not measure its own)."
          " The Node client's fixed-rate figures are of the measured part after a warm-up at the"
          " same rate on the same workers (two minutes unless `--warmup-seconds` says"
          " otherwise), while V8 is still compiling; the warm-up is the \"warm-up\" column."
          " The Rust client has no such phase: its figures are from its start."
          " The Redis library's figures are the issue's, not re-measured in this run.")
    idle = [r for r in rows if r.get("helper_threads") == "idle"]
    for r in idle:
        print()
        print(f"Node client, {r['shape']} at {r['flows_per_s']:.0f}/s with V8's helper threads at"
              f" idle priority (`--helper-threads idle`): create→done p50 / p99 **{r['p50_ms']} /"
              f" {r['p99_ms']} ms** ({r['flows']} flows; warm-up {r.get('cold_p50_ms')} /"
              f" {r.get('cold_p99_ms')} ms).")
    ceilings = [r for r in rows if r["shape"] == "ceiling"]
    linear = next((r for r in rows if r["shape"] == "linear" and r["client"] == "node"
                   and r["mode"] == "saturated"), None)
    if ceilings:
        print()
        print("| one Node process, small JSON POSTs on kept connections | requests/s "
              "| × client transport | Node CPU ms/request | server CPU ms/request "
              "| bound on linear flows/s |")
        print("|---|---:|---:|---:|---:|---:|")
        per_flow = (linear or {}).get("requests_per_flow")
        own = next((r["requests_per_s"] for r in ceilings if r["mode"] == "client transport"),
                   None)
        for r in ceilings:
            bound = f"{r['requests_per_s'] / per_flow:,.0f}" if per_flow else "–"
            ratio = f"{r['requests_per_s'] / own:.2f}" if own else "–"
            print(f"| {r['mode']} | {r['requests_per_s']:,} | {ratio} "
                  f"| {r['node_cpu_ms_per_request']} "
                  f"| {cell(r['server_cpu_ms_per_request'])} | {bound} |")
        print()
        print("The ceiling: 16 loops in one Node process, each leasing with no wait from an"
              " empty stage on a session of its own, against the same server in the same run."
              " Its requests/s divided by the Node client's requests per linear flow bounds"
              " the linear flows/s any client in one Node process could reach here.")


if __name__ == "__main__":
    main(sys.argv[1])
