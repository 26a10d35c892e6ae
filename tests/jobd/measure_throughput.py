"""Quick throughput measurement of `jobyard jobd` (not a test, not collected by pytest; a
seed for the jobd workload of bench/): 2000 rows inserted at once, launcher /bin/true, one
poll, until every row is `done`; 1 target x concurrency 1, 1 x 8, 4 x 4; compared with the
launch floor `xargs -P N -n1 /bin/true`. Uses a private MariaDB in a temp dir.

    cargo build --release -p jobyard && python3 tests/jobd/measure_throughput.py
"""

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
spec = importlib.util.spec_from_file_location("jobd_conftest", HERE / "conftest.py")
c = importlib.util.module_from_spec(spec)
spec.loader.exec_module(c)
from jobyard_testlib import free_port  # noqa: E402

BIN = Path(os.environ.get("JOBYARD_BIN", HERE.parent.parent / "target" / "release" / "jobyard"))
N = 2000


def run(m, targets: str, label: str):
    db = c.JobsDb(m)
    names = [t.split("=")[0].strip() for t in targets.split("\n")]
    vals = ",".join(f"('{names[i % len(names)]}', UNIX_TIMESTAMP(), 'waiting')" for i in range(N))
    db.sql(f"INSERT INTO jobs (target, time_created, status) VALUES {vals}")
    port = free_port()
    cfg = Path(tempfile.gettempdir()) / f"jobd-measure-{port}.conf"
    cfg.write_text(
        f"host = 127.0.0.1\nport = {port}\nmysql_host = 127.0.0.1\nmysql_port = {m.port}\n"
        f"mysql_user = root\nmysql_password = \"\"\nmysql_database = {db.name}\nmysql_table = jobs\n"
        f"launcher = /bin/true {{id}}\n[targets]\n{targets}\n"
    )
    d = c.Daemon(BIN, "jobd", cfg, port)
    s = socket.create_connection(("127.0.0.1", port))
    t0 = time.time()
    s.sendall(b'[0,{"no":1,"type":"poll"}]\x04')
    s.recv(100)
    while int(db.sql("SELECT COUNT(*) FROM jobs WHERE status='done'")[0][0]) < N:
        time.sleep(0.05)
    dt = time.time() - t0
    status = open(f"/proc/{d.proc.pid}/status").read()
    hwm = [line for line in status.splitlines() if line.startswith("VmHWM")][0].split()[1]
    stat = open(f"/proc/{d.proc.pid}/stat").read().split(")")[1].split()
    cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    d.stop()
    cfg.unlink()
    print(f"{label}: {N / dt:.0f} jobs/s, daemon CPU {cpu * 1000 / N:.2f} ms/job, peak RSS {hwm} kB")


def main():
    root = Path(tempfile.mkdtemp(prefix="jobd-measure-"))
    m = c.Mariadb(root)
    try:
        for targets, label in [("t1 = 1", "1x1"), ("t1 = 8", "1x8"), ("a = 4\nb = 4\nc = 4\nd = 4", "4x4")]:
            run(m, targets, label)
        for p in (1, 8):
            t0 = time.time()
            subprocess.run(f"seq {N} | xargs -P {p} -n1 /bin/true", shell=True, check=True)
            print(f"launch floor xargs -P {p}: {N / (time.time() - t0):.0f}/s")
    finally:
        m.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
