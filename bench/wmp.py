#!/usr/bin/env python3
"""14/WMP benchmark: jobyard as the manager against the bare ZeroMQ ceiling, in one run.

    python3 bench/wmp.py                       # workers 1 and 8, 3 s each
    python3 bench/wmp.py --workers 8 --duration 5 --binary target/release/jobyard
    python3 bench/wmp.py --no-gearman          # only the two workloads below

Two workloads per worker count N, both with N pyzmq DEALER processes on loopback:

* bare: a pyzmq ROUTER that echoes every message (same frame sizes as a WMP job), each
  DEALER doing request/reply round trips back to back. This is the physical ceiling of
  one ZeroMQ round trip on this machine with this library.
* wmp: `jobyard serve --wmp-listen` with jobs put through beanstalkd beforehand, each
  DEALER a worker following docs/wmp.md. `--worker-rule hot` (the default, worker rule 5):
  after a DONE whose TAKE said `more=1` the worker sends GIVE at once (DONE, GIVE, TAKE: three
  messages per job); `classic`: READY after every DONE (READY, WAKE, GIVE, TAKE, DONE: five).
  A classic job costs at least two round trips (GIVE→TAKE, DONE), so 0.5 is the ratio's
  ceiling when the workers are the bottleneck, and a hot one one round trip (DONE+GIVE →
  TAKE), so 1; with one worker the Python echo server itself is slower than jobyard's
  manager and the ratio can pass those.

`--ab OLD_BINARY --rounds N` instead measures, per round and worker count, the bare loop,
then for each worker rule of `--ab-rules` (default `classic,hot`) OLD_BINARY and `--binary`,
one after the other (alternating for N rounds, so all see the same machine), and prints one
row each with the WMP messages per job the workers exchanged.

Reported: jobs/s, round trips/s, their ratio, and the server's CPU per job / per round trip
(user+system time of the manager or echo process from /proc).

Then a second table, the round trip Gearman client -> WMP worker -> result: `jobyard-bench
gearman roundtrip` (the Rust load generator of bench/compare.sh's Gearman rows) runs C
foreground clients (SUBMIT_JOB, wait for WORK_COMPLETE, back to back) against `jobyard serve`
with both listeners, and N pyzmq WMP workers serve the function as a role. Reported: jobs/s,
the client's submit -> WORK_COMPLETE latency p50/p99, and the server's CPU per job; a
reference row runs the same clients against N Gearman workers of jobyard-bench instead.
Skipped (with a note) when the jobyard-bench binary is missing.

Use a release build for figures worth quoting (the script says which binary it ran); keep
runs short on a shared machine. Needs pyzmq (scripts/setup.sh installs it).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import zmq

ROOT = Path(__file__).resolve().parents[1]
SIG = b"WMP01"
BODY = b"x" * 100
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_stats(pid: int) -> dict:
    """Per thread of `pid`: (name, voluntary switches, involuntary switches, CPU seconds)."""
    stats = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kv = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        stats[task.name] = (name, int(kv["voluntary_ctxt_switches"]),
                            int(kv["nonvoluntary_ctxt_switches"]),
                            (int(fields[11]) + int(fields[12])) / TICK)
    return stats


def thread_report(before: dict, after: dict, jobs: int) -> str:
    """Per-job switches and CPU of each busy thread between two `thread_stats`."""
    rows = []
    for tid, (name, vol, invol, cpu) in sorted(after.items()):
        # A thread born during the run (a compaction's, the blocking pool's) counts from 0.
        _, vol0, invol0, cpu0 = before.get(tid, (name, 0, 0, 0.0))
        if cpu - cpu0 < 0.02:
            continue
        rows.append(f"{name}[{tid}]: {(vol - vol0) / jobs:.2f} vol + "
                    f"{(invol - invol0) / jobs:.2f} invol switches, "
                    f"{(cpu - cpu0) * 1e6 / jobs:.1f} µs CPU per job")
    return "; ".join(rows)


def parse_headers(frame: bytes) -> dict:
    return dict(line.split(b"=", 1) for line in frame.split(b"\n") if line)


# -- bare ROUTER <-> DEALER echo ------------------------------------------------------------


def echo_server(endpoint: str, ready) -> None:
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind(endpoint)
    ready.set()
    while True:
        router.send_multipart(router.recv_multipart(copy=False), copy=False)


def echo_client(endpoint: str, start: float, stop: float, out) -> None:
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(endpoint)
    msg = [b"", SIG, b"TAKE", b"lock=1\nmanager=m\njob=1\nattempt=1\nqueue=q\ntimeout=60000", BODY]
    while time.time() < start:
        time.sleep(0.001)
    n = 0
    while time.time() < stop:
        dealer.send_multipart(msg)
        dealer.recv_multipart()
        n += 1
    out.put(n)
    dealer.close(0)
    ctx.term()


def run_bare(workers: int, duration: float) -> dict:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    ready = mp.Event()
    server = mp.Process(target=echo_server, args=(endpoint, ready), daemon=True)
    server.start()
    ready.wait(10)
    out = mp.Queue()
    start = time.time() + 0.5
    clients = [
        mp.Process(target=echo_client, args=(endpoint, start, start + duration, out))
        for _ in range(workers)
    ]
    for c in clients:
        c.start()
    time.sleep(max(0.0, start - time.time()))
    cpu0 = cpu_seconds(server.pid)
    total = sum(out.get(timeout=duration + 60) for _ in clients)
    cpu = cpu_seconds(server.pid) - cpu0
    for c in clients:
        c.join()
    server.kill()
    server.join()
    return {"per_s": total / duration, "cpu_us": cpu * 1e6 / max(total, 1), "count": total}


# -- jobyard as the WMP manager -------------------------------------------------------------


def wmp_worker(endpoint: str, start: float, stop: float, out, rule: str = "hot") -> None:
    """One single-slot worker. Puts (jobs done, messages sent + received) on `out`."""
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(endpoint)
    ready = [b"", SIG, b"READY", b"roles=bench"]
    while time.time() < start:
        time.sleep(0.001)
    done = 0
    lock = 0
    messages = 1
    dealer.send_multipart(ready)
    while time.time() < stop:
        if not dealer.poll(200):
            dealer.send_multipart(ready)  # READY retry (docs/wmp.md, worker rule 7)
            messages += 1
            continue
        frames = dealer.recv_multipart()
        messages += 1
        command = frames[2]
        if command == b"WAKE":
            lock += 1
            dealer.send_multipart(
                [b"", SIG, b"GIVE", b"lock=%d\nroles=bench\nqueue=bench" % lock]
            )
            messages += 1
        elif command == b"TAKE":
            h = parse_headers(frames[3])
            dealer.send_multipart(
                [b"", SIG, b"DONE",
                 b"manager=%s\njob=%s\nattempt=%s\nstatus=ok" % (h[b"manager"], h[b"job"],
                                                                  h[b"attempt"]),
                 frames[4] if len(frames) > 4 else b""]
            )
            done += 1
            if rule == "hot" and h.get(b"more") == b"1":
                # Worker rule 5: the manager has more on this queue, ask for it at once.
                lock += 1
                dealer.send_multipart(
                    [b"", SIG, b"GIVE", b"lock=%d\nroles=bench\nqueue=%s" % (lock, h[b"queue"])]
                )
            else:
                dealer.send_multipart(ready)
            messages += 2
        elif command == b"NO":
            dealer.send_multipart(ready)
            messages += 1
    out.put((done, messages))
    dealer.close(0)
    ctx.term()


def put_jobs(port: int, count: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"use bench\r\n")
        f = s.makefile("rb")
        assert f.readline().startswith(b"USING")
        chunk = 1000
        for base in range(0, count, chunk):
            n = min(chunk, count - base)
            s.sendall(b"".join(b"put 0 0 60 %d\r\n%s\r\n" % (len(BODY), BODY) for _ in range(n)))
            for _ in range(n):
                line = f.readline()
                assert line.startswith(b"INSERTED"), line


class Server:
    """`jobyard serve` on free loopback ports with the WMP manager, beanstalkd and Gearman
    listeners, fsync never, in a temp data dir removed at the end."""

    def __init__(self, binary: str):
        self.data = tempfile.mkdtemp(prefix="jobyard-wmp-bench-")
        # The server's log lines, beside (not in) its data dir: they say when it compacted.
        fd, self.log = tempfile.mkstemp(prefix="jobyard-wmp-bench-", suffix=".log")
        os.close(fd)
        self.bport = free_port()
        self.gport = free_port()
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        log = open(self.log, "wb")  # the child keeps its own descriptor
        self.proc = subprocess.Popen(
            [binary, "serve", "--data-dir", self.data, "--fsync", "never",
             "--beanstalk-listen", f"127.0.0.1:{self.bport}",
             "--gearman-listen", f"127.0.0.1:{self.gport}",
             "--http-listen", "off", "--wmp-listen", self.endpoint, "--wmp-name", "bench"],
            stdout=subprocess.DEVNULL, stderr=log,
        )
        log.close()
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.bport), 1).close()
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("jobyard did not start")
                time.sleep(0.05)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def compactions(self) -> int:
        """Log compactions the server has started so far (from its own log lines)."""
        try:
            return Path(self.log).read_text(errors="replace").count("compacting the log")
        except OSError:
            return 0

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.data, ignore_errors=True)
        Path(self.log).unlink(missing_ok=True)


def start_workers(endpoint: str, workers: int, start: float, stop: float, rule: str = "hot"):
    out = mp.Queue()
    procs = [
        mp.Process(target=wmp_worker, args=(endpoint, start, stop, out, rule))
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    return procs, out


def run_wmp(binary: str, workers: int, duration: float, jobs: int, rule: str = "hot") -> dict:
    server = Server(binary)
    try:
        put_jobs(server.bport, jobs)
        start = time.time() + 0.5
        procs, out = start_workers(server.endpoint, workers, start, start + duration, rule)
        time.sleep(max(0.0, start - time.time()))
        cpu0 = cpu_seconds(server.pid)
        threads0 = thread_stats(server.pid)
        compactions0 = server.compactions()
        results = [out.get(timeout=duration + 60) for _ in procs]
        total = sum(r[0] for r in results)
        messages = sum(r[1] for r in results)
        cpu = cpu_seconds(server.pid) - cpu0
        compactions = server.compactions() - compactions0
        threads = thread_report(threads0, thread_stats(server.pid), max(total, 1))
        for p in procs:
            p.join()
        if total >= jobs:
            print(f"  note: all {jobs} jobs were done before the end; raise --jobs",
                  file=sys.stderr)
        if compactions:
            print(f"  note: the server compacted its log during the run ({workers} workers): "
                  f"its CPU is in the figure; a smaller --jobs keeps the log under the "
                  f"threshold", file=sys.stderr)
        return {"per_s": total / duration, "cpu_us": cpu * 1e6 / max(total, 1), "count": total,
                "threads": threads, "msgs": messages / max(total, 1),
                "compactions": compactions}
    finally:
        server.stop()


# -- Gearman client -> WMP worker -> result -------------------------------------------------


def gearman_roundtrip(bench: str, binary: str, workers: int, clients: int, duration: float,
                      wmp: bool, rule: str = "hot") -> dict:
    """Foreground Gearman clients of jobyard-bench; the function served by `workers` pyzmq
    WMP workers (wmp) or by as many Gearman workers of jobyard-bench (the reference)."""
    server = Server(binary)
    procs = []
    try:
        if wmp:
            # The workers outlive the clients; they are stopped below.
            start = time.time() + 0.2
            procs, _ = start_workers(server.endpoint, workers, start, start + duration + 60,
                                     rule)
            time.sleep(1.0)  # connected and READY before the first submit
        cmd = [bench, "gearman", "roundtrip", "--addr", f"127.0.0.1:{server.gport}",
               "--conns", str(clients), "--workers", "0" if wmp else str(workers),
               "--size", str(len(BODY)), "--duration", str(duration),
               "--server-pid", str(server.pid), "--json"]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120)
        line = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
        if res.returncode != 0 or not line.startswith("{"):
            raise RuntimeError(f"jobyard-bench failed: {res.stderr.strip()[-500:]}")
        r = json.loads(line)
        if r.get("errors") or r.get("conn_errors"):
            print(f"  note: jobyard-bench reported errors: {r.get('first_error')}",
                  file=sys.stderr)
        return {"per_s": r["jobs_per_s"], "p50_ms": r["lat_p50_us"] / 1000,
                "p99_ms": r["lat_p99_us"] / 1000, "cpu_us": r["server_cpu_us_per_job"],
                "count": r["jobs"]}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join(10)
        server.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_bin = ROOT / "target" / "release" / "jobyard"
    if not default_bin.exists():
        default_bin = ROOT / "target" / "debug" / "jobyard"
    ap.add_argument("--binary", default=str(default_bin))
    ap.add_argument("--workers", default="1,8", help="comma-separated worker counts")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per workload")
    ap.add_argument("--jobs", type=int, default=200_000,
                    help="jobs put before each wmp run: enough that none runs dry in 5 s at 8 "
                         "workers, few enough that the log (about 160 B per queued job) stays "
                         "under the server's 64 MiB compaction threshold, so no compaction "
                         "started by the backlog lands in the measured window")
    ap.add_argument("--bench-binary", default=str(Path(default_bin).with_name("jobyard-bench")),
                    help="jobyard-bench, the Gearman clients of the round trip workload")
    ap.add_argument("--clients", type=int, default=8,
                    help="Gearman foreground clients of the round trip workload")
    ap.add_argument("--threads", action="store_true",
                    help="after the first table, the server's busy threads per job (context "
                         "switches and CPU from /proc) in each WMP run")
    ap.add_argument("--no-gearman", action="store_true",
                    help="skip the Gearman client -> WMP worker round trip workload")
    ap.add_argument("--worker-rule", choices=("hot", "classic"), default="hot",
                    help="hot: GIVE right after DONE when the TAKE said more=1 (docs/wmp.md "
                         "worker rule 5); classic: READY after every DONE")
    ap.add_argument("--ab", metavar="OLD_BINARY",
                    help="A/B instead: OLD_BINARY and --binary alternating, with each worker "
                         "rule of --ab-rules (see above)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of --ab")
    ap.add_argument("--ab-rules", default="classic,hot",
                    help="worker rules of --ab, each run with the old and the new binary "
                         "(comma-separated: classic, hot)")
    args = ap.parse_args()
    print(f"binary: {args.binary}; {args.duration:g} s per workload; body {len(BODY)} B; "
          f"{os.cpu_count()} cores; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.ab:
        return run_ab(args)
    print("| workers | bare round trips/s | echo CPU µs/rt | WMP jobs/s | manager CPU µs/job "
          "| jobs/s ÷ round trips/s |")
    print("|---|---|---|---|---|---|")
    threads = []
    compacted = 0
    for n in [int(x) for x in args.workers.split(",")]:
        bare = run_bare(n, args.duration)
        wmp = run_wmp(args.binary, n, args.duration, args.jobs, args.worker_rule)
        print(f"| {n} | {bare['per_s']:,.0f} | {bare['cpu_us']:.1f} | {wmp['per_s']:,.0f} "
              f"| {wmp['cpu_us']:.1f} | {wmp['per_s'] / max(bare['per_s'], 1):.2f} |",
              flush=True)
        threads.append(f"- {n} worker{'s' if n != 1 else ''}: {wmp['threads']}")
        compacted += wmp["compactions"]
    print()
    print(f"{args.jobs:,} jobs queued before each WMP run; log compactions during the "
          f"measured runs: {compacted} (a compaction's CPU would be in the manager's figure).")
    if args.threads:
        print()
        print("Server threads per WMP job (libzmq's I/O thread has the server's own name):")
        print()
        print("\n".join(threads))
    if args.no_gearman:
        print_load_after()
        return 0
    print()
    print(f"Gearman client -> WMP worker -> result: {args.clients} foreground clients "
          f"(jobyard-bench gearman roundtrip), N pyzmq WMP workers; the reference row has "
          f"N Gearman workers (jobyard-bench) instead.")
    print()
    if not os.access(args.bench_binary, os.X_OK):
        print(f"Skipped: {args.bench_binary} is missing (cargo build --release -p jobyard-bench).")
        print_load_after()
        return 0
    print("| workers | served by | jobs/s | latency p50 ms | latency p99 ms | server CPU µs/job |")
    print("|---|---|---|---|---|---|")
    for n in [int(x) for x in args.workers.split(",")]:
        for wmp, label in ((True, "WMP (pyzmq)"), (False, "Gearman (reference)")):
            r = gearman_roundtrip(args.bench_binary, args.binary, n, args.clients,
                                  args.duration, wmp, args.worker_rule)
            print(f"| {n} | {label} | {r['per_s']:,.0f} | {r['p50_ms']:.2f} | "
                  f"{r['p99_ms']:.2f} | {r['cpu_us']:.1f} |", flush=True)
    print_load_after()
    return 0


def run_ab(args) -> int:
    """Per round and worker count, for each --ab-rules worker rule the old binary then the
    new one, each beside a bare loop of the same round."""
    variants = [(f"{which}, {rule}", binary, rule)
                for rule in args.ab_rules.split(",")
                for which, binary in (("old", args.ab), ("new", args.binary))]
    print("| round | workers | binary, worker rule | echo CPU µs/rt | WMP jobs/s "
          "| manager CPU µs/job | msgs/job | jobs/s ÷ round trips/s | compactions | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rnd in range(1, args.rounds + 1):
        for n in [int(x) for x in args.workers.split(",")]:
            bare = run_bare(n, args.duration)
            for label, binary, rule in variants:
                wmp = run_wmp(binary, n, args.duration, args.jobs, rule)
                print(f"| {rnd} | {n} | {label} | {bare['cpu_us']:.1f} | {wmp['per_s']:,.0f} "
                      f"| {wmp['cpu_us']:.1f} | {wmp['msgs']:.2f} "
                      f"| {wmp['per_s'] / max(bare['per_s'], 1):.2f} "
                      f"| {wmp['compactions']} | {os.getloadavg()[0]:.1f} |", flush=True)
    print_load_after()
    return 0


def print_load_after() -> None:
    print()
    print(f"Load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"(above ~0.5 the machine was shared: compare CPU per job and ratios, not rates).")


if __name__ == "__main__":
    sys.exit(main())
