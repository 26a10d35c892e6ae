#!/usr/bin/env python3
"""Markdown table of bench/flows/run.sh's JSON lines, with the Redis library's figures from
issue 12 (measured earlier on this machine: Redis 7, 4 workers per queue) as the anchor."""

import json
import sys

# Guild Queues on Redis (issue 12): flows/s at saturation, create→done p50/p99 ms at 10/s.
ANCHOR = {"linear": (37.5, 310, 317), "fanout": (3.5, 1600, 1800)}


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip().startswith("{")]
    print("| shape | client | saturated flows/s | × Redis lib | server CPU ms/flow "
          "| create→done p50 / p99 ms at 10/s | Redis lib p50 / p99 |")
    print("|---|---|---|---|---|---|---|")
    for shape in ("linear", "fanout"):
        for client in ("rust", "node"):
            sat = next((r for r in rows if r["shape"] == shape and r["client"] == client
                        and r["mode"] == "saturated"), None)
            fixed = next((r for r in rows if r["shape"] == shape and r["client"] == client
                          and r["mode"] == "fixed"), None)
            if not sat or not fixed:
                continue
            base, p50, p99 = ANCHOR[shape]
            print(f"| {shape} | {client} | {sat['flows_per_s']:,.0f} | {sat['flows_per_s'] / base:,.0f}× "
                  f"| {sat['server_cpu_ms_per_flow']} | {fixed['p50_ms']} / {fixed['p99_ms']} "
                  f"| {p50} / {p99} |")
    print()
    print("Linear: 3 stages; fanout: 3 stages, the middle one fanning out to 3 children (the"
          " Redis anchor is its fan-out of 2). 4 workers per stage, trivial handlers, fsync always."
          " The Redis library's figures are the issue's, not re-measured in this run.")


if __name__ == "__main__":
    main(sys.argv[1])
