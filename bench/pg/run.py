"""jobyard on PostgreSQL, measured side by side with its peers on one PostgreSQL in one run
(issue 27, point 10; bench/pg/run.sh builds what it needs and calls this).

Sections (--sections, comma-separated; default all but compaction):

- drain:    50,000 queued jobs drained by jobyard (beanstalkd protocol, N consumers
            reserve → delete) and by graphile-worker with its defaults, with 24 concurrent
            jobs and with its documented performance options; jobs/s and ratios.
- latency:  producer → consumer at 200 jobs/s, p50/p99, jobyard vs graphile-worker.
- put:      durable put latency at 1,000/s on jobyard-on-PostgreSQL vs a bare single-row
            INSERT (autocommit) from one client (`jobyard-bench pg-insert`).
- cpu:      jobyard's CPU per job at 5,000 jobs/s (put + reserve + delete) on PostgreSQL
            storage vs the file log (--fsync always), alternating; PostgreSQL's CPU per job
            apart.
- failover: kill -9 of the leader of two supervised nodes → the first acknowledged put
            through any node, over --kills kills.
- lag:      a standby's lag_ms from its GET /v1/cluster every 50 ms while the leader is
            saturated with puts.
- compaction: 1,000,000 jobs put and deleted, then the schema's size on disk against the
            live rows (the newest snapshot and the log after it), before and after VACUUM.

Every figure goes to a JSON line (--jsonl) and the report to --md. Nothing here asserts a
timing: figures are reported with the ratio against each target.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from jobyard_testlib import HOST, free_port, other_listeners_off  # noqa: E402
from pg_testlib import Cluster, Postgres  # noqa: E402

ALL = ["drain", "latency", "put", "cpu", "failover", "lag"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class Bench:
    """One run: one PostgreSQL, the binaries, the JSON lines written as they come."""

    def __init__(self, args) -> None:
        self.args = args
        self.jy = str(args.binary)
        self.jb = str(args.bench)
        self.out = open(args.jsonl, "a")
        self.work = Path(tempfile.mkdtemp(prefix="jobyard-pgbench-"))
        self.pg = Postgres().start()
        self.env = dict(os.environ, PGPASSWORD=self.pg.password, JOBYARD_LOG="warn")
        self.dbs = 0
        self.results: dict = {}
        self.others_off = list(other_listeners_off(self.jy))

    def close(self) -> None:
        self.pg.destroy()
        shutil.rmtree(self.work, ignore_errors=True)

    def record(self, line: dict) -> dict:
        line = dict(line, load=loadavg(), at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        self.out.write(json.dumps(line) + "\n")
        self.out.flush()
        log(json.dumps(line))
        return line

    def database(self, prefix: str) -> str:
        """A fresh database's URL."""
        self.dbs += 1
        name = f"{prefix}_{self.dbs}"
        self.pg.create_database(name)
        return self.pg.url(name)

    # -- PostgreSQL's CPU: the postmaster and its children, live and reaped ------------------

    def pg_cpu_s(self) -> float:
        tick = os.sysconf("SC_CLK_TCK")
        root = self.pg.proc.pid
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                text = stat.read_text()
            except OSError:
                continue
            fields = text[text.rfind(")") + 2:].split()
            pid, ppid = int(stat.parent.name), int(fields[1])
            if pid == root:
                # utime, stime, and the reaped children's cutime, cstime
                total += sum(int(x) for x in fields[11:15])
            elif ppid == root:
                total += int(fields[11]) + int(fields[12])
        return total / tick

    # -- servers ---------------------------------------------------------------------------

    def start_jobyard(self, storage_url: str | None, extra=()) -> tuple:
        """A jobyard with only the beanstalkd listener, on PostgreSQL or the file log."""
        port = free_port()
        d = Path(tempfile.mkdtemp(dir=self.work))
        cmd = [self.jy, "serve", "--beanstalk-listen", f"{HOST}:{port}", *self.others_off, *extra]
        if storage_url:
            cmd += ["--storage", storage_url]
        else:
            cmd += ["--data-dir", str(d / "data"), "--fsync", "always"]
        logf = open(d / "server.log", "ab")
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                env=self.env)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection((HOST, port), timeout=1).close()
                return proc, port
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"jobyard did not start: {(d / 'server.log').read_text()[-2000:]}")
                time.sleep(0.05)

    @staticmethod
    def stop(proc) -> None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def jb_run(self, *argv, timeout=600) -> dict:
        json_flag = [] if argv[0] == "pg-insert" else ["--json"]
        out = subprocess.run([self.jb, *argv, *json_flag], capture_output=True, text=True,
                             timeout=timeout, env=self.env)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            raise RuntimeError(f"jobyard-bench {' '.join(argv)} failed: {out.stderr[-2000:]}")
        return json.loads(lines[-1])

    def node(self, *argv, timeout=900) -> dict:
        out = subprocess.run(["node", str(HERE / "graphile.mjs"), *argv], capture_output=True,
                             text=True, timeout=timeout, env=self.env, cwd=HERE)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        if out.returncode != 0 or not lines:
            raise RuntimeError(f"graphile.mjs {argv[0]} failed: {out.stderr[-2000:]}")
        return json.loads(lines[-1])

    # -- sections --------------------------------------------------------------------------

    def drain(self) -> None:
        a = self.args
        consumers = [int(c) for c in str(a.consumers).split(",")]
        jy_sides = [f"jobyard-{c}" for c in consumers]
        sides = jy_sides + ["defaults", "c24", "perf"]
        rows = {side: [] for side in sides}
        for r in range(a.rounds):
            for side in sides:
                url = self.database("drain")
                if side.startswith("jobyard"):
                    proc, port = self.start_jobyard(url)
                    try:
                        line = self.jb_run("beanstalk", "drain", "--addr", f"{HOST}:{port}",
                                           "--count", str(a.jobs), "--workers", side.split("-")[1],
                                           "--duration", "600", "--server-pid", str(proc.pid))
                    finally:
                        self.stop(proc)
                    line = {"side": side, **{k: line.get(k) for k in (
                        "jobs", "jobs_per_s", "prefilled", "lat_p50_us", "lat_p99_us",
                        "server_cpu_us_per_job", "errors", "timed_out")}}
                else:
                    line = {"side": f"graphile-{side}", **self.node(
                        "drain", "--url", url, "--jobs", str(a.jobs), "--mode", side)}
                rows[side].append(self.record({"section": "drain", "round": r, **line}))
        med = {k: statistics.median(x["jobs_per_s"] for x in v) for k, v in rows.items()}
        self.results["drain"] = {"median_jobs_per_s": med, "rounds": a.rounds, "jobyard_sides": jy_sides,
                                 "vs": {j: {p: med[j] / med[p] for p in ("defaults", "c24", "perf")}
                                        for j in jy_sides},
                                 "round_pairs": {j: {p: [x["jobs_per_s"] / y["jobs_per_s"]
                                                         for x, y in zip(rows[j], rows[p])]
                                                     for p in ("defaults", "c24", "perf")}
                                                 for j in jy_sides}}

    def latency(self) -> None:
        a = self.args
        jy, gw = [], {"defaults": [], "c24": []}
        for r in range(a.rounds):
            url = self.database("lat")
            proc, port = self.start_jobyard(url)
            try:
                common = ["beanstalk", "e2e", "--addr", f"{HOST}:{port}", "--conns", "1",
                          "--workers", str(a.latency_consumers), "--rate", "200",
                          "--server-pid", str(proc.pid)]
                self.jb_run(*common, "--duration", "1")  # warm-up, as the peer's
                line = self.jb_run(*common, "--duration", str(a.seconds))
            finally:
                self.stop(proc)
            jy.append(self.record({"section": "latency", "round": r, "side": "jobyard",
                                   "consumers": a.latency_consumers, **{
                k: line.get(k) for k in ("jobs", "lat_p50_us", "lat_p99_us", "lat_max_us",
                                         "put_p50_us", "put_p99_us", "rate_lag_max_ms")}}))
            for mode in gw:
                url = self.database("lat")
                gw[mode].append(self.record({
                    "section": "latency", "round": r, "side": f"graphile-{mode}",
                    **self.node("latency", "--url", url, "--rate", "200", "--seconds", str(a.seconds),
                                "--warmup", "1", "--mode", mode)}))
        med = lambda rows, k: statistics.median(x[k] for x in rows)  # noqa: E731
        res = {"consumers": a.latency_consumers,
               "jobyard_p50_us": med(jy, "lat_p50_us"), "jobyard_p99_us": med(jy, "lat_p99_us")}
        for mode, rows in gw.items():
            res[f"graphile_{mode}_p50_us"] = med(rows, "lat_p50_us")
            res[f"graphile_{mode}_p99_us"] = med(rows, "lat_p99_us")
            res[f"p99_ratio_{mode}"] = res["jobyard_p99_us"] / res[f"graphile_{mode}_p99_us"]
        self.results["latency"] = res

    def put(self) -> None:
        a = self.args
        jy, bare = [], []
        for r in range(a.rounds):
            url = self.database("ins")
            bare.append(self.record({"section": "put", "round": r, "side": "bare-insert", **self.jb_run(
                "pg-insert", "--url", url, "--rate", "1000", "--duration", str(a.seconds), "--warmup", "1")}))
            url = self.database("put")
            proc, port = self.start_jobyard(url)
            try:
                # --put-consumers 0: puts alone (the jobs stay queued), so PostgreSQL commits
                # only the puts, as the bare INSERT's side does.
                common = ["beanstalk", "e2e", "--addr", f"{HOST}:{port}", "--conns", "1",
                          "--workers", str(a.put_consumers), "--max-backlog", "100000000",
                          "--rate", "1000", "--server-pid", str(proc.pid)]
                self.jb_run(*common, "--duration", "1")
                line = self.jb_run(*common, "--duration", str(a.seconds))
            finally:
                self.stop(proc)
            jy.append(self.record({"section": "put", "round": r, "side": "jobyard", **{
                k: line.get(k) for k in ("puts_acked", "put_p50_us", "put_p99_us", "put_max_us",
                                         "rate_lag_max_ms", "server_cpu_us_per_job")}}))
        j99 = statistics.median(x["put_p99_us"] for x in jy)
        b99 = statistics.median(x["lat_p99_us"] for x in bare)
        self.results["put"] = {"consumers": a.put_consumers,
            "jobyard_p50_us": statistics.median(x["put_p50_us"] for x in jy), "jobyard_p99_us": j99,
            "insert_p50_us": statistics.median(x["lat_p50_us"] for x in bare), "insert_p99_us": b99,
            "p99_ratio": j99 / b99}

    def cpu(self) -> None:
        a = self.args
        pg_rows, file_rows = [], []
        for r in range(a.cpu_rounds):
            for side in ["file", "postgres"]:
                url = self.database("cpu") if side == "postgres" else None
                proc, port = self.start_jobyard(url)
                try:
                    pg0 = self.pg_cpu_s()
                    line = self.jb_run("beanstalk", "e2e", "--addr", f"{HOST}:{port}", "--rate", "5000",
                                       "--duration", str(a.cpu_seconds), "--server-pid", str(proc.pid))
                    pg_cpu = self.pg_cpu_s() - pg0
                finally:
                    self.stop(proc)
                row = {"section": "cpu", "round": r, "side": side, **{k: line.get(k) for k in (
                    "jobs", "cost_jobs", "jobs_per_s", "server_cpu_us_per_job", "lat_p99_us",
                    "rate_lag_max_ms", "errors")},
                    "postgres_cpu_us_per_job": pg_cpu * 1e6 / max(1, line["cost_jobs"])}
                (pg_rows if side == "postgres" else file_rows).append(self.record(row))
        p = statistics.median(x["server_cpu_us_per_job"] for x in pg_rows)
        f = statistics.median(x["server_cpu_us_per_job"] for x in file_rows)
        pairs = [x["server_cpu_us_per_job"] / y["server_cpu_us_per_job"] for x, y in zip(pg_rows, file_rows)]
        self.results["cpu"] = {
            "postgres_us_per_job": p, "file_us_per_job": f, "ratio": p / f,
            "pair_ratios": pairs,
            "postgres_server_us_per_job": statistics.median(x["postgres_cpu_us_per_job"] for x in pg_rows),
            "postgres_server_us_per_job_file_side": statistics.median(
                x["postgres_cpu_us_per_job"] for x in file_rows)}

    # -- failover and lag: against whatever the nodes of today's main do -------------------

    def cluster(self, url: str) -> Cluster:
        logs = Path(tempfile.mkdtemp(dir=self.work))
        c = Cluster(self.jy, url, logs, size=2, env=self.env)
        c.start(timeout=60)
        return c

    @staticmethod
    def try_put(port: int, timeout: float = 0.5) -> bool:
        try:
            with socket.create_connection((HOST, port), timeout=timeout) as s:
                s.settimeout(timeout)
                s.sendall(b"put 0 0 60 5\r\nhello\r\n")
                return s.recv(64).startswith(b"INSERTED")
        except OSError:
            return False

    def failover(self) -> None:
        a = self.args
        url = self.database("fo")
        c = self.cluster(url)
        times, through = [], []
        try:
            for k in range(a.kills):
                old = c.leader(timeout=60)
                # The standby must be up (waiting) before the kill, or its start is measured.
                others = [n for n in c.nodes if n is not old]
                deadline = time.monotonic() + 30
                while not all(n.running() for n in others) and time.monotonic() < deadline:
                    time.sleep(0.05)
                time.sleep(a.settle)
                old.kill9()
                t0 = time.monotonic()
                # Every node probed at once, each on its own thread, so that a put stuck on
                # one door (spliced to the dead leader) does not delay the others' tries.
                done = threading.Event()
                first: list = []

                def probe(n):
                    while not done.is_set() and time.monotonic() - t0 < 60:
                        if self.try_put(n.beanstalk_port, 0.2):
                            first.append((time.monotonic() - t0, n))
                            done.set()
                            return
                        time.sleep(0.005)

                probes = [threading.Thread(target=probe, args=(n,), daemon=True) for n in c.nodes]
                for t in probes:
                    t.start()
                for t in probes:
                    t.join()
                took, acked = min(first, key=lambda x: x[0]) if first else (time.monotonic() - t0, None)
                if acked is None:
                    self.record({"section": "failover", "kill": k, "error": "no put acknowledged in 60 s"})
                    break
                times.append(took)
                through.append(acked.name != old.name)
                self.record({"section": "failover", "kill": k, "seconds": took, "killed": old.name,
                             "acked_by": acked.name})
        finally:
            for n in c.nodes:
                n.stop()
        if times:
            s = sorted(times)
            self.results["failover"] = {
                "kills": len(times), "p50_s": s[len(s) // 2],
                "p99_s": s[min(len(s) - 1, int(0.99 * len(s)))], "max_s": s[-1],
                "through_another_node": sum(through)}

    def lag(self) -> None:
        a = self.args
        url = self.database("lag")
        c = self.cluster(url)
        try:
            leader = c.leader(timeout=60)
            standby = next(n for n in c.nodes if n is not leader)
            # A standby loads the snapshot and opens its front door first: up to 30 s.
            deadline = time.monotonic() + 30
            first = None
            while time.monotonic() < deadline:
                first = standby.cluster(timeout=1)
                if first is not None and first.get("role") == "standby" and "lag_ms" in first:
                    break
                time.sleep(0.2)
            if first is None or "lag_ms" not in first or first.get("role") != "standby":
                self.results["lag"] = {"error": "the standby does not serve GET /v1/cluster with its "
                                                "role and lag_ms within 30 s",
                                       "standby_answer": first}
                self.record({"section": "lag", **self.results["lag"]})
                return
            samples, errors = [], 0
            stop = threading.Event()

            def sample():
                nonlocal errors
                while not stop.is_set():
                    t = time.monotonic()
                    doc = standby.cluster(timeout=1)
                    if doc is not None and isinstance(doc.get("lag_ms"), (int, float)):
                        samples.append(doc["lag_ms"])
                    else:
                        errors += 1
                    stop.wait(max(0.0, 0.05 - (time.monotonic() - t)))

            th = threading.Thread(target=sample, daemon=True)
            th.start()
            line = self.jb_run("beanstalk", "put", "--addr", f"{HOST}:{leader.beanstalk_port}",
                               "--duration", str(a.seconds), "--count", "100000000")
            stop.set()
            th.join()
            s = sorted(samples)
            res = {"samples": len(s), "errors": errors, "puts_per_s": line.get("jobs_per_s")}
            if s:
                res.update(p50_ms=s[len(s) // 2], p99_ms=s[min(len(s) - 1, int(0.99 * len(s)))],
                           max_ms=s[-1])
            self.results["lag"] = res
            self.record({"section": "lag", **res})
        finally:
            for n in c.nodes:
                n.stop()

    # -- compaction ------------------------------------------------------------------------

    def sizes(self, db: str, schema: str = "jobyard") -> dict:
        q = lambda s: self.pg.sql(s, db=db)  # noqa: E731
        tables = q(f"SELECT c.relname, pg_total_relation_size(c.oid), pg_relation_size(c.oid), "
                   f"coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0), "
                   f"coalesce(s.autovacuum_count, 0), coalesce(s.vacuum_count, 0) "
                   f"FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                   f"LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
                   f"WHERE n.nspname = '{schema}' AND c.relkind = 'r' ORDER BY 1")
        per = {t[0]: {"total": int(t[1]), "heap": int(t[2]), "live_tup": int(t[3]),
                      "dead_tup": int(t[4]), "autovacuums": int(t[5]), "vacuums": int(t[6])}
               for t in tables}
        snap = q(f"SELECT coalesce(max(section), -1) FROM {schema}.snapshots WHERE complete")[0][0]
        snap = int(snap)
        # Stored sizes (pg_column_size: after PostgreSQL's compression, as they sit on disk),
        # and the records' own bytes beside them.
        live_log = q(f"SELECT count(*), coalesce(sum(pg_column_size(records)), 0), "
                     f"coalesce(sum(octet_length(records)), 0) FROM {schema}.log "
                     f"WHERE section >= {max(snap, 0)}")[0]
        live_snap = q(f"SELECT count(*), coalesce(sum(pg_column_size(records)), 0), "
                      f"coalesce(sum(octet_length(records)), 0) FROM "
                      f"{schema}.snapshot_chunks WHERE section = {snap}")[0]
        live = int(live_log[1]) + int(live_snap[1])
        raw = int(live_log[2]) + int(live_snap[2])
        all_log = q(f"SELECT count(*), min(section), max(section) FROM {schema}.log")[0]
        total = sum(v["total"] for v in per.values())
        return {"tables": per, "schema_bytes": total, "newest_snapshot_section": snap,
                "live_log_rows": int(live_log[0]), "live_log_bytes": int(live_log[1]),
                "live_snapshot_rows": int(live_snap[0]), "live_snapshot_bytes": int(live_snap[1]),
                "live_bytes": live, "live_raw_bytes": raw,
                "log_rows": int(all_log[0]), "log_sections": [all_log[1], all_log[2]],
                "ratio": total / live if live else None}

    def compaction(self) -> None:
        a = self.args
        url = self.database("compact")
        db = url.rsplit("/", 1)[1]
        proc, port = self.start_jobyard(url)
        t0 = time.monotonic()
        stop_vacuum = threading.Event()
        vacuums = []
        if a.vacuum_every:
            # What jobyard vacuuming its own tables after each compaction would do, to tell
            # whether the bloat is autovacuum's delay (see the report).
            def vacuum_loop():
                while not stop_vacuum.wait(a.vacuum_every):
                    try:
                        self.pg.sql("VACUUM jobyard.log, jobyard.snapshot_chunks, jobyard.snapshots", db=db)
                        vacuums.append(time.monotonic() - t0)
                    except RuntimeError as e:
                        log(f"vacuum: {e}")
            threading.Thread(target=vacuum_loop, daemon=True).start()
        try:
            done = 0
            batch = 200_000
            while done < a.compaction_jobs:
                n = min(batch, a.compaction_jobs - done)
                line = self.jb_run("beanstalk", "drain", "--addr", f"{HOST}:{port}", "--count", str(n),
                                   "--workers", "24", "--duration", "600", "--server-pid", str(proc.pid))
                done += int(line["jobs"])
                log(f"compaction: {done} jobs put and deleted")
            churn_s = time.monotonic() - t0
            stop_vacuum.set()
            settings = {r[0]: r[1] for r in self.pg.sql(
                "SELECT name, setting FROM pg_settings WHERE name LIKE 'autovacuum%'", db=db)}
            after = self.record({"section": "compaction", "phase": "right after", "jobs": done,
                                 "churn_s": churn_s, "vacuum_every_s": a.vacuum_every,
                                 "vacuums_during_load": len(vacuums), **self.sizes(db)})
            waited = []
            for w in range(a.autovacuum_wait // 15):
                time.sleep(15)
                waited.append(self.record({"section": "compaction", "phase": f"{(w + 1) * 15} s later",
                                           **self.sizes(db)}))
            self.pg.sql("VACUUM", db=db)
            vac = self.record({"section": "compaction", "phase": "after VACUUM", **self.sizes(db)})
            self.pg.sql("VACUUM FULL", db=db)
            full = self.record({"section": "compaction", "phase": "after VACUUM FULL", **self.sizes(db)})
        finally:
            stop_vacuum.set()
            self.stop(proc)
        self.results["compaction"] = {"jobs": done, "vacuum_every_s": a.vacuum_every, "right_after": after,
                                      "waited": waited[-1] if waited else None,
                                      "after_vacuum": vac, "after_vacuum_full": full,
                                      "autovacuum_settings": settings}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", required=True)
    p.add_argument("--bench", required=True)
    p.add_argument("--sections", default=",".join(ALL))
    p.add_argument("--jobs", type=int, default=50_000, help="drain: queued jobs")
    p.add_argument("--consumers", default="8,24",
                   help="drain: jobyard's consumers, a run for each of a comma-separated list")
    p.add_argument("--rounds", type=int, default=1, help="drain, latency, put: rounds")
    p.add_argument("--latency-consumers", type=int, default=8,
                   help="latency: jobyard's consumers (graphile-worker: its defaults and 24 concurrent)")
    p.add_argument("--seconds", type=int, default=10, help="latency, put, lag: measured seconds")
    p.add_argument("--put-consumers", type=int, default=0,
                   help="put: jobyard's consumers meanwhile (0: puts alone, the jobs stay queued)")
    p.add_argument("--cpu-rounds", type=int, default=3)
    p.add_argument("--cpu-seconds", type=int, default=5)
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--settle", type=float, default=1.0, help="failover: seconds between a takeover and the next kill")
    p.add_argument("--compaction-jobs", type=int, default=1_000_000)
    p.add_argument("--autovacuum-wait", type=int, default=90,
                   help="compaction: seconds to wait for autovacuum before an explicit VACUUM")
    p.add_argument("--vacuum-every", type=float, default=0,
                   help="compaction: also VACUUM jobyard's tables every S seconds during the load (0: never)")
    p.add_argument("--jsonl", required=True)
    p.add_argument("--summary", required=True, help="the results as one JSON document")
    a = p.parse_args()
    # A stop (Ctrl-C, SIGTERM) still removes the PostgreSQL this run made.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: sys.exit(130))
    b = Bench(a)
    started = loadavg()
    try:
        for s in a.sections.split(","):
            log(f"section {s} (load {loadavg()})")
            try:
                getattr(b, s)()
            except Exception as e:  # report what could not be measured, go on
                b.results[s] = {"error": str(e)[-1500:]}
                b.record({"section": s, "error": str(e)[-1500:]})
    finally:
        b.close()
    b.results["load_start"] = started
    b.results["load_end"] = loadavg()
    Path(a.summary).write_text(json.dumps(b.results, indent=1) + "\n")


if __name__ == "__main__":
    main()
