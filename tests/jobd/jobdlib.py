"""Helpers shared by the jobd tests that run a jobd worker inside `jobyard serve`: waiting,
probing ports and processes, and a server whose launcher blocks each job until told."""

from __future__ import annotations

import socket
import subprocess
import time

from jobyard_testlib import free_port


def wait(cond, what: str, timeout: float = 30):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return ") Z " not in f.read()
    except FileNotFoundError:
        return False


def poll(jobyard_bin, port: int, *targets: str):
    subprocess.run([str(jobyard_bin), "jobctl", "--port", str(port), "poll", *targets],
                   check=True, capture_output=True, timeout=60)


def serve_with_jobd(start_server, jobs_db, tmp_path, targets: str, *, name: str = "w",
                    extra_args: tuple[str, ...] = ()):
    """A server with beanstalkd, Gearman and a jobd worker called `name` whose launcher
    (`tmp_path/run.sh`) writes `pid-<id>`, touches `started-<id>`, then blocks until the file
    `go` exists. Returns the server, the jobd port and the Gearman port."""
    run = tmp_path / "run.sh"
    run.write_text(
        'd=$(dirname "$0")\necho $$ > "$d/pid-$1"\ntouch "$d/started-$1"\n'
        'while [ ! -f "$d/go" ]; do sleep 0.02; done\necho "id=$1"\n'
    )
    jobd_port, gearman_port = free_port(), free_port()
    cfg = tmp_path / "jobd.conf"
    cfg.write_text(
        f"host = 127.0.0.1\nport = {jobd_port}\nname = {name}\n"
        f"mysql_host = 127.0.0.1\nmysql_port = {jobs_db.m.port}\nmysql_user = root\n"
        f"mysql_password = \"\"\nmysql_database = {jobs_db.name}\nmysql_table = jobs\n"
        f"launcher = /bin/sh {run} {{id}}\nshutdown_timeout = 2\n[targets]\n{targets}\n"
    )
    srv = start_server(extra_args=["--jobd-config", str(cfg),
                                   "--gearman-listen", f"127.0.0.1:{gearman_port}",
                                   *extra_args])
    wait(lambda: port_open(jobd_port), "the jobd listener")
    return srv, jobd_port, gearman_port

