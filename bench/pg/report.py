"""The report of bench/pg/run.py's summary: one table per section, each figure set against
issue 27's target as a ratio. `python3 bench/pg/report.py RUN.summary.json [MORE.summary.json...]`
(sections of several runs in one report: a later file's section replaces an earlier one's)."""

from __future__ import annotations

import json
import sys


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def f(x, digits=0) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def main() -> None:
    r = {}
    loads = []
    for path in sys.argv[1:]:
        part = json.load(open(path))
        loads.append(f"{part.get('load_start')} → {part.get('load_end')}")
        r.update(part)
    out = []
    say = out.append
    if "drain" in r:
        d = r["drain"]
        say("## Drain of queued jobs (jobyard vs graphile-worker)\n")
        if "error" in d:
            say(f"Not measured: `{d['error']}`\n")
        else:
            m = d["median_jobs_per_s"]
            say(f"Median of {d['rounds']} round(s), jobs/s; the ratio is jobyard's jobs/s over the peer's:\n")
            heads = " | ".join(f"{j.replace('jobyard-', 'jobyard, ')} consumers ÷ side" for j in d["jobyard_sides"])
            say(f"| side | jobs/s | {heads} | target |")
            say("|---|---:|" + "---:|" * len(d["jobyard_sides"]) + "---|")
            for j in d["jobyard_sides"]:
                n = j.split("-")[1]
                say(f"| jobyard, {n} consumers reserve → delete (beanstalkd protocol) | {f(m[j])} |" + " |" * len(d["jobyard_sides"]) + " |")
            targets = {"defaults": 10, "c24": None, "perf": 1}
            names = {"defaults": "graphile-worker defaults (1 concurrent job)", "c24": "graphile-worker, 24 concurrent jobs",
                     "perf": "graphile-worker, performance options (24 concurrent, local queue 500, batched completion)"}
            for p in ("defaults", "c24", "perf"):
                cells = " | ".join(f"{d['vs'][j][p]:.2f}×" for j in d["jobyard_sides"])
                t = targets[p]
                best = max(d["vs"][j][p] for j in d["jobyard_sides"])
                tcell = "" if t is None else f"≥ {t}×: {verdict(best >= t)}"
                say(f"| {names[p]} | {f(m[p])} | {cells} | {tcell} |")
            if d.get("round_pairs") and d["rounds"] > 1:
                for j, peers in d["round_pairs"].items():
                    say(f"\nRounds' pairs, {j}: " + "; ".join(
                        f"{p} " + ", ".join(f"{x:.2f}" for x in v) for p, v in peers.items()))
            say("")
    if "latency" in r:
        d = r["latency"]
        say("## Producer → consumer latency at 200 jobs/s\n")
        if "error" in d:
            say(f"Not measured: `{d['error']}`\n")
        else:
            say("| side | p50 ms | p99 ms | jobyard's p99 ÷ side's | target ≤ 0.25× |")
            say("|---|---:|---:|---:|---|")
            say(f"| jobyard (put → reserved; 1 producer, {d['consumers']} consumers) | {d['jobyard_p50_us'] / 1e3:.2f} | {d['jobyard_p99_us'] / 1e3:.2f} | | |")
            for mode, name in (("defaults", "defaults (1 concurrent job)"), ("c24", "24 concurrent jobs")):
                if f"graphile_{mode}_p99_us" in d:
                    ratio = d[f"p99_ratio_{mode}"]
                    say(f"| graphile-worker {name} (addJob → task starts) | {d[f'graphile_{mode}_p50_us'] / 1e3:.2f} | "
                        f"{d[f'graphile_{mode}_p99_us'] / 1e3:.2f} | {ratio:.2f}× | {verdict(ratio <= 0.25)} |")
            say("")
    if "put" in r:
        d = r["put"]
        say("## Durable put latency at 1,000/s\n")
        if "error" in d:
            say(f"Not measured: `{d['error']}`\n")
        else:
            say("| side | p50 ms | p99 ms |")
            say("|---|---:|---:|")
            meanwhile = (f"{d['consumers']} consumers reserve → delete meanwhile" if d.get("consumers")
                         else "puts alone, the jobs stay queued")
            say(f"| jobyard on PostgreSQL, put → INSERTED (1 producer; {meanwhile}) | {d['jobyard_p50_us'] / 1e3:.3f} | {d['jobyard_p99_us'] / 1e3:.3f} |")
            say(f"| bare single-row INSERT, autocommit, one sqlx client | {d['insert_p50_us'] / 1e3:.3f} | {d['insert_p99_us'] / 1e3:.3f} |")
            say(f"\np99 ratio: **{d['p99_ratio']:.2f}×** (target ≤ 2×: {verdict(d['p99_ratio'] <= 2)})\n")
    if "cpu" in r:
        d = r["cpu"]
        say("## Leader CPU per job at 5,000 jobs/s (put + reserve + delete, beanstalkd protocol)\n")
        if "error" in d:
            say(f"Not measured: `{d['error']}`\n")
        else:
            say("| storage | jobyard CPU µs/job | PostgreSQL CPU µs/job |")
            say("|---|---:|---:|")
            say(f"| PostgreSQL | {d['postgres_us_per_job']:.1f} | {d['postgres_server_us_per_job']:.1f} |")
            say(f"| file log, `--fsync always` | {d['file_us_per_job']:.1f} | ({d['postgres_server_us_per_job_file_side']:.1f}, idle) |")
            pairs = ", ".join(f"{x:.2f}" for x in d["pair_ratios"])
            say(f"\nRatio of the medians: **{d['ratio']:.2f}×** (target ≤ 1.5×: {verdict(d['ratio'] <= 1.5)}); rounds' pairs {pairs}.\n")
    if "failover" in r:
        d = r["failover"]
        say("## Failover: kill -9 of the leader → first acknowledged put\n")
        if "error" in d:
            say(f"Not measured: `{d['error']}`\n")
        else:
            say(f"{d['kills']} kills: p50 {d['p50_s']:.2f} s, p99 **{d['p99_s']:.2f} s**, max {d['max_s']:.2f} s "
                f"(target p99 ≤ 5 s: {verdict(d['p99_s'] <= 5)}); acknowledged through the other node in "
                f"{d['through_another_node']} of {d['kills']}.\n")
    if "lag" in r:
        d = r["lag"]
        say("## Standby lag under saturating load\n")
        if "error" in d:
            say(f"Not measured: {d['error']} (answer: `{json.dumps(d.get('standby_answer'))}`)\n")
        else:
            say(f"{d['samples']} samples of `lag_ms` every 50 ms while the leader took {f(d.get('puts_per_s'))} puts/s: "
                f"p50 {f(d.get('p50_ms'), 1)} ms, p99 **{f(d.get('p99_ms'), 1)} ms**, max {f(d.get('max_ms'), 1)} ms "
                f"(target p99 ≤ 100 ms: {verdict(d.get('p99_ms') is not None and d['p99_ms'] <= 100)}); {d['errors']} failed samples.\n")
    if "compaction" in r:
        d = r["compaction"]
        say("## Compaction: 1,000,000 jobs put and deleted\n")
        if d.get("vacuum_every_s"):
            say(f"With an explicit `VACUUM` of jobyard's tables every {d['vacuum_every_s']:g} s during the load "
                "(standing in for jobyard vacuuming after each compaction).\n")
        if "error" in d:
            say(f"Not measured: `{d['error']}`\n")
        else:
            say("| when | schema on disk MiB | live MiB (snapshot + log after it) | ratio | dead tuples (log) | autovacuums (log) |")
            say("|---|---:|---:|---:|---:|---:|")
            for key, name in [("right_after", "right after the load"), ("waited", "after waiting for autovacuum"),
                              ("after_vacuum", "after `VACUUM`"), ("after_vacuum_full", "after `VACUUM FULL`")]:
                s = d.get(key)
                if not s:
                    continue
                # `log` and, since schema version 4, its partitions (log_s<N>, log_default).
                parts = [t for name, t in s["tables"].items() if name == "log" or name.startswith("log_")]
                lg = ({k: sum(t[k] for t in parts) for k in ("dead_tup", "autovacuums")} if parts else {})
                ratio = "–" if s["ratio"] is None else f"{s['ratio']:.2f}×"
                say(f"| {name} | {s['schema_bytes'] / 2**20:.1f} | {s['live_bytes'] / 2**20:.1f} | {ratio} | "
                    f"{lg.get('dead_tup', '–')} | {lg.get('autovacuums', '–')} |")
            full = d.get("after_vacuum_full")
            before = d.get("after_vacuum") or d.get("right_after")
            if full and before:
                say(f"\nThe same rows rewritten compactly (`VACUUM FULL`) take {full['schema_bytes'] / 2**20:.1f} MiB: "
                    f"the schema after the load and `VACUUM` is {before['schema_bytes'] / full['schema_bytes']:.2f}× that. "
                    f"The live rows' records are {before['live_raw_bytes'] / 2**20:.1f} MiB before PostgreSQL's "
                    f"compression ({before['schema_bytes'] / before['live_raw_bytes']:.2f}× on disk); the bench's "
                    f"bodies (repeated bytes) compress far better than most real ones.")
            settings = ", ".join(f"{k}={v}" for k, v in sorted(d["autovacuum_settings"].items())
                                 if k in ("autovacuum", "autovacuum_naptime", "autovacuum_vacuum_scale_factor",
                                          "autovacuum_vacuum_threshold", "autovacuum_vacuum_insert_scale_factor"))
            say(f"\nPostgreSQL's autovacuum settings (defaults): {settings}.\n")
    say(f"Load average (1, 5, 15 min) at the start → the end of each run: {'; '.join(loads)}.")
    print("\n".join(out))


if __name__ == "__main__":
    main()
