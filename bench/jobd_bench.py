"""The jobd workload (issue 10): `jobyard jobd` on a real MariaDB started in a temp dir.

For each shape (1 target x concurrency 1, 1 x 8, 4 x 4), with launcher `true`:
- throughput: N rows INSERTed in batches, each batch followed by a poke (a jobd `poll`
  for its targets); jobs finished per second from the first INSERT to the last `done`;
  the worker's CPU per job and RSS (and MariaDB's CPU per job, for scale);
- latency: one row at a time, INSERT (committed) + poke -> the row read back as `done`
  (the client re-reads the row every --poll-ms until it is; p50/p99 over the samples),
  poking the worker directly; and, for one shape, through `jobyard jobd-master` (default
  poke throttle, samples spaced past it so each poke is a first one). The client sleeps
  between reads: a busy re-read loop kept a core busy (Python plus MariaDB answering) on a
  2-core machine and was itself most of the p99; the sleep adds on average half an
  interval to each sample;
- with --breakdown, the 1x8 worker logs at debug level and the server-side split of each
  latency sample (fetch, queue, spawn, run, done write) is printed from its
  `jobd: job timing` events;
- the launch floor: `seq N | xargs -P P -n1 true` with P = the shape's total concurrency.
The 1 x 8 shape is also run with the worker inside `jobyard serve --jobd-config`.

Run through bench/jobd.sh (builds the release binary first). Prints a markdown section and
writes one JSON line per measurement to --jsonl.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pymysql

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
_spec = importlib.util.spec_from_file_location("jobd_conftest", ROOT / "tests/jobd/conftest.py")
jc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(jc)
from jobyard_testlib import free_port  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")
TRUE = shutil.which("true") or "/bin/true"
SHAPES = [("1x1", {"t1": 1}), ("1x8", {"t1": 8}), ("4x4", {"a": 4, "b": 4, "c": 4, "d": 4})]


def cpu_s(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / CLK


def children_cpu_s(pid: int) -> float:
    """CPU time of the process's reaped children (the launched jobs)."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[13]) + int(stat[14])) / CLK


def context_switches(pid: int) -> int:
    """Voluntary + involuntary context switches of all the process's live threads (each
    thread's /proc status counts its own only); a thread that ended meanwhile is missed."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            lines = status.read_text().splitlines()
        except OSError:
            continue
        total += sum(int(l.split()[1]) for l in lines if "ctxt_switches:" in l)
    return total


def mem_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


class Eot:
    """A jobd protocol connection (EOT-framed JSON), one request at a time."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.no = 0
        self.buf = b""

    def request(self, kind: str, data: dict | None = None):
        self.no += 1
        msg = {"no": self.no, "type": kind}
        if data is not None:
            msg["data"] = data
        self.sock.sendall(json.dumps([0, msg]).encode() + b"\x04")
        while True:
            if b"\x04" in self.buf:
                frame, self.buf = self.buf.split(b"\x04", 1)
                reply = json.loads(frame)
                if reply[0] == 1:
                    return reply[1]
                continue
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buf += chunk


class Db:
    def __init__(self, m, name: str):
        m.sql(f"CREATE DATABASE {name}")
        m.sql(jc.SCHEMA, name)
        self.name = name
        self.conn = pymysql.connect(host="127.0.0.1", port=m.port, user="root", password="",
                                    database=name, autocommit=True)
        self.cur = self.conn.cursor()

    def insert(self, targets: list[str]) -> int:
        values = ",".join(f"('{t}', UNIX_TIMESTAMP(), 'waiting')" for t in targets)
        self.cur.execute(f"INSERT INTO jobs (target, time_created, status) VALUES {values}")
        return self.cur.lastrowid

    def done_count(self) -> int:
        self.cur.execute("SELECT COUNT(*) FROM jobs WHERE status='done'")
        return self.cur.fetchone()[0]

    def status(self, job_id: int) -> str:
        self.cur.execute("SELECT status FROM jobs WHERE id=%s", (job_id,))
        row = self.cur.fetchone()
        return row[0] if row else ""

    def server_counters(self) -> dict[str, int]:
        """MariaDB's server-wide counters of statements, explicit COMMITs and InnoDB fsyncs (the
        bench's own INSERTs and reads are in them too: about 0.1 statement per job)."""
        self.cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN"
                         " ('Questions','Com_commit','Innodb_data_fsyncs')")
        return {k: int(v) for k, v in self.cur.fetchall()}

    def close(self):
        self.conn.close()


def wait_port(port: int, proc: subprocess.Popen, what: str):
    deadline = time.time() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                err = proc.stderr.read().decode()[-2000:] if proc.stderr else "see its log"
                raise RuntimeError(f"{what} did not start: {err}")
            time.sleep(0.02)


def listeners_off(binary: Path) -> list[str]:
    out = subprocess.run([str(binary), "serve", "--help"], capture_output=True, text=True).stdout
    return [x for f in sorted(set(re.findall(r"(--[a-z0-9-]+-listen)\b", out))) for x in (f, "off")]


class Worker:
    """`jobyard jobd --config F`, or `jobyard serve --jobd-config F` with the other
    listeners off."""

    def __init__(self, binary: Path, m, db: Db, shape: dict, tmp: Path, serve: bool,
                 master_port: int | None = None, debug: bool = False):
        self.port = free_port()
        targets = "".join(f"{t} = {c}\n" for t, c in shape.items())
        master = (f"master_host = 127.0.0.1\nmaster_port = {master_port}\n"
                  "master_reconnect_timeout = 1\n") if master_port else ""
        cfg = tmp / f"jobd-{self.port}.conf"
        cfg.write_text(
            f"host = 127.0.0.1\nport = {self.port}\nname = bench\n{master}"
            f"mysql_host = 127.0.0.1\nmysql_port = {m.port}\nmysql_user = root\n"
            f"mysql_password = \"\"\nmysql_database = {db.name}\nmysql_table = jobs\n"
            f"launcher = {TRUE} {{id}}\n"
            f"{'log_level_console = debug' if debug else ''}\n[targets]\n{targets}"
        )
        self.log = tmp / f"jobd-{self.port}.log"
        if serve:
            data = tmp / f"data-{self.port}"
            cmd = [str(binary), "serve", "--data-dir", str(data), *listeners_off(binary),
                   "--jobd-config", str(cfg)]
        else:
            cmd = [str(binary), "jobd", "--config", str(cfg)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "wb") if debug else subprocess.PIPE)
        wait_port(self.port, self.proc, "the jobd worker")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def throughput(db: Db, worker: Worker, shape: dict, n: int, batch: int, mariadb_pid: int) -> dict:
    names = list(shape)
    poke = Eot(worker.port)
    cpu0, db_cpu0 = cpu_s(worker.proc.pid), cpu_s(mariadb_pid)
    kids0 = children_cpu_s(worker.proc.pid)
    switches0 = context_switches(worker.proc.pid)
    counters0 = db.server_counters()
    t0 = time.perf_counter()
    sent = 0
    while sent < n:
        k = min(batch, n - sent)
        rows = [names[(sent + i) % len(names)] for i in range(k)]
        db.insert(rows)
        poke.request("poll", {"targets": sorted(set(rows))})
        sent += k
    # Every 20 ms: the count is a query MariaDB answers (its CPU is in the per-job figure);
    # at most 20 ms late on a run of a few seconds.
    while db.done_count() < n:
        time.sleep(0.02)
    dt = time.perf_counter() - t0
    cpu = cpu_s(worker.proc.pid) - cpu0
    kids = children_cpu_s(worker.proc.pid) - kids0
    db_cpu = cpu_s(mariadb_pid) - db_cpu0
    switches = context_switches(worker.proc.pid) - switches0
    counters = {k: v - counters0.get(k, 0) for k, v in db.server_counters().items()}
    return {
        "jobs": n, "seconds": round(dt, 3), "jobs_per_s": round(n / dt, 1),
        "worker_cpu_ms_per_job": round(cpu * 1000 / n, 3),
        "worker_cpu_pct": round(cpu / dt * 100, 1),
        "launched_cpu_ms_per_job": round(kids * 1000 / n, 3),
        "worker_switches_per_job": round(switches / n, 2),
        "mariadb_cpu_ms_per_job": round(db_cpu * 1000 / n, 3),
        "statements_per_job": round(counters.get("Questions", 0) / n, 2),
        "commits_per_job": round(counters.get("Com_commit", 0) / n, 2),
        "fsyncs_per_job": round(counters.get("Innodb_data_fsyncs", 0) / n, 2),
        "worker_rss_kib": mem_kib(worker.proc.pid, "VmRSS"),
        "worker_hwm_kib": mem_kib(worker.proc.pid, "VmHWM"),
    }


def latency(db: Db, port: int, kind: str, target: str, samples: int, spacing: float,
            poll_s: float) -> dict:
    conn = Eot(port)
    lat = []
    reads = 0
    ids = []
    for _ in range(samples):
        t0 = time.perf_counter()
        job = db.insert([target])
        conn.request(kind, {"targets": [target]})
        while db.status(job) != "done":
            reads += 1
            time.sleep(poll_s)
        lat.append((time.perf_counter() - t0) * 1000)
        ids.append(job)
        if spacing:
            time.sleep(spacing)
    return {"samples": samples, "p50_ms": round(pct(lat, 50), 2), "p99_ms": round(pct(lat, 99), 2),
            "max_ms": round(max(lat), 2), "reads_per_sample": round(reads / samples + 1, 1),
            "ids": ids, "ms": lat}


TIMING = re.compile(r"jobd: job timing.*?\bid=(\d+)(.*)")
STAGES = ("fetch_us", "queued_us", "spawn_us", "run_us", "write_us", "total_us")


def breakdown(log: Path, lat: dict) -> dict:
    """p50/p99 of each stage of the worker's `jobd: job timing` events for the latency
    samples' rows, next to the client's own figure (the rest: INSERT, poke, reading back)."""
    wanted = set(lat["ids"])
    stages: dict[str, list[float]] = {k: [] for k in STAGES}
    for line in log.read_text(errors="replace").splitlines():
        m = TIMING.search(re.sub(r"\x1b\[[0-9;]*m", "", line))
        if not m or int(m.group(1)) not in wanted:
            continue
        fields = dict(re.findall(r"(\w+)=(\d+)", m.group(2)))
        for k in STAGES:
            stages[k].append(int(fields.get(k, 0)) / 1000)
    out = {k: (round(pct(v, 50), 2), round(pct(v, 99), 2)) for k, v in stages.items() if v}
    out["client_ms"] = (round(pct(lat["ms"], 50), 2), round(pct(lat["ms"], 99), 2))
    out["rows"] = len(stages["total_us"])
    return out


def launch_floor(n: int, p: int) -> float:
    t0 = time.perf_counter()
    subprocess.run(f"seq {n} | xargs -P {p} -n1 {TRUE}", shell=True, check=True)
    return round(n / (time.perf_counter() - t0), 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target/release/jobyard"))
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--master-samples", type=int, default=15)
    ap.add_argument("--jsonl", default="")
    ap.add_argument("--db-flush", type=int, choices=(0, 1, 2), default=1,
                    help="MariaDB innodb_flush_log_at_trx_commit (1, its default: fsync per commit)")
    ap.add_argument("--poll-ms", type=float, default=0.25,
                    help="latency: pause between the client's reads of the row")
    ap.add_argument("--breakdown", action="store_true",
                    help="1x8 worker at debug level; print where its latency goes")
    ap.add_argument("--shapes-only", action="store_true",
                    help="only the three `jobd` shapes (no serve, no master run): for A/B runs")
    a = ap.parse_args()
    poll_s = a.poll_ms / 1000
    binary = Path(a.bin)
    tmp = Path(tempfile.mkdtemp(prefix="jobd-bench-"))
    try:
        m = jc.Mariadb(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        m.sql(f"SET GLOBAL innodb_flush_log_at_trx_commit = {a.db_flush}")
        # Printed with the figures, so a run says what durability the database had.
        db_settings = dict(zip(
            ("innodb_flush_log_at_trx_commit", "log_bin", "sync_binlog", "version"),
            m.sql("SELECT @@innodb_flush_log_at_trx_commit, @@log_bin, @@sync_binlog, VERSION()")[0]))
    except BaseException:
        m.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    results = []

    def record(**kw):
        results.append(kw)
        if a.jsonl:
            with open(a.jsonl, "a") as f:
                f.write(json.dumps(kw) + "\n")

    counter = [0]

    def fresh_db() -> Db:
        counter[0] += 1
        return Db(m, f"bench{counter[0]}")

    try:
        runs = [(label, shape, False) for label, shape in SHAPES]
        if not a.shapes_only:
            runs.append(("1x8", SHAPES[1][1], True))
        for label, shape, serve in runs:
            db = fresh_db()
            debug = a.breakdown and label == "1x8" and not serve
            w = Worker(binary, m, db, shape, tmp, serve, debug=debug)
            try:
                tp = throughput(db, w, shape, a.jobs, a.batch, m.proc.pid)
                lat = latency(db, w.port, "poll", next(iter(shape)), a.samples, 0, poll_s)
            finally:
                w.stop()
                db.close()
            split = breakdown(w.log, lat) if debug else None
            lat.pop("ids"), lat.pop("ms")
            floor = launch_floor(a.jobs, sum(shape.values()))
            record(shape=label, mode="serve" if serve else "jobd", loadavg=os.getloadavg()[0], **tp,
                   lat_direct=lat, floor_per_s=floor, **({"breakdown": split} if split else {}))
        if not a.shapes_only:
            # Through the master: its poke throttle (default 0.5 s) delays a poke that follows
            # another within the interval, so samples are spaced past it.
            db = fresh_db()
            mport = free_port()
            mcfg = tmp / "master.conf"
            mcfg.write_text(f"host = 127.0.0.1\nport = {mport}\n")
            master = subprocess.Popen([str(binary), "jobd-master", "--config", str(mcfg)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                wait_port(mport, master, "jobd-master")
                w = Worker(binary, m, db, SHAPES[1][1], tmp, False, master_port=mport)
                try:
                    ctl = Eot(mport)
                    deadline = time.time() + 30
                    while not ctl.request("status").get("data", {}).get("workers"):
                        assert time.time() < deadline, "the worker never registered"
                        time.sleep(0.05)
                    lat = latency(db, mport, "poke", "t1", a.master_samples, 0.55, poll_s)
                    lat.pop("ids"), lat.pop("ms")
                finally:
                    w.stop()
            finally:
                master.terminate()
                master.wait(30)
                db.close()
            record(shape="1x8", mode="via-master", lat_master=lat)
        record(mode="settings", **db_settings, loadavg=os.getloadavg()[0])
    finally:
        m.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print("| shape | worker | jobs/s | launch floor/s (xargs -P) | vs floor | worker CPU ms/job"
          " (% of a core) | MariaDB CPU ms/job | worker RSS / peak MiB |"
          " INSERT+poke → done p50 / p99 ms | MariaDB statements / commits / fsyncs per job |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        if "jobs_per_s" not in r:
            continue
        p = sum(dict(SHAPES)[r["shape"]].values())
        print(f"| {r['shape']} | {'`serve --jobd-config`' if r['mode'] == 'serve' else '`jobd`'}"
              f" | {r['jobs_per_s']:.0f} | {r['floor_per_s']:.0f} (-P {p}) |"
              f" {r['jobs_per_s'] / r['floor_per_s']:.2f} |"
              f" {r['worker_cpu_ms_per_job']:.3f} ({r['worker_cpu_pct']:.0f} %) |"
              f" {r['mariadb_cpu_ms_per_job']:.3f} |"
              f" {r['worker_rss_kib'] / 1024:.1f} / {r['worker_hwm_kib'] / 1024:.1f} |"
              f" {r['lat_direct']['p50_ms']:.2f} / {r['lat_direct']['p99_ms']:.2f} |"
              f" {r['statements_per_job']:.2f} / {r['commits_per_job']:.2f} / {r['fsyncs_per_job']:.2f} |")
    for r in results:
        if "breakdown" in r:
            b = r["breakdown"]
            print(f"\nWhere the 1x8 latency goes (server side, {b['rows']} rows; p50 / p99 ms):"
                  f" client INSERT+poke → done {b['client_ms'][0]} / {b['client_ms'][1]};"
                  f" worker: fetch (BEGIN…COMMIT) {b['fetch_us'][0]} / {b['fetch_us'][1]},"
                  f" fetched → picked up {b['queued_us'][0]} / {b['queued_us'][1]},"
                  f" spawn {b['spawn_us'][0]} / {b['spawn_us'][1]},"
                  f" run (exit + pipes closed) {b['run_us'][0]} / {b['run_us'][1]},"
                  f" done write {b['write_us'][0]} / {b['write_us'][1]},"
                  f" fetch start → stored {b['total_us'][0]} / {b['total_us'][1]}.")
    for r in results:
        if "lat_master" in r:
            lm = r["lat_master"]
            print(f"\nThrough `jobyard jobd-master` (1x8, poke to the master, default"
                  f" poke_throttle_interval 0.5 s, {lm['samples']} samples spaced 0.55 s):"
                  f" INSERT+poke → done p50 {lm['p50_ms']:.2f} ms, p99 {lm['p99_ms']:.2f} ms,"
                  f" max {lm['max_ms']:.2f} ms.")
    print(f"\n{a.jobs} rows per throughput run, INSERTed {a.batch} per statement, each batch"
          f" followed by a poke; latency: {a.samples} sequential samples per shape, the client"
          f" re-reading the row every {a.poll_ms} ms until it is `done`. Launcher `true`; MariaDB in a temp dir,"
          f" innodb_flush_log_at_trx_commit = {db_settings['innodb_flush_log_at_trx_commit']}"
          f"{' (its default: an fsync per commit)' if a.db_flush == 1 else ''},"
          f" log_bin = {db_settings['log_bin']} (sync_binlog = {db_settings['sync_binlog']}),"
          f" MariaDB {db_settings['version']}, on the same machine; load average at the end"
          f" {os.getloadavg()[0]:.1f}.")


if __name__ == "__main__":
    main()
