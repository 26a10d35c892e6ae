"""A full PostgreSQL disk behaves like the file log's full disk (docs/postgres.md): the
log's table lives in a tablespace on a small tmpfs; once that is full, new jobs are refused
(beanstalkd OUT_OF_MEMORY, Gearman ERROR OUT_OF_MEMORY), the batch that could not go in is
retried and nothing in it is acknowledged meanwhile, the server keeps running; once there
is room, the waiting put and a delete issued while full go in, new jobs are accepted again,
and a restart finds every acknowledged change.

Mounting the tmpfs needs root (CI runs the tests as root): run as another user, the test
fails saying so rather than skipping silently."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import struct
import subprocess
import threading
import time

import greenstalk
import pytest

from jobyard_testlib import HOST, free_port
from pg_testlib import PG_USER, Postgres

# Small enough to fill in an instant, large enough for the server's first batches.
TMPFS_SIZE = "4m"
BIG_BODY = 300_000


def wait_until(check, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def fill(directory) -> str:
    """Writes a file in `directory` until the file system has no room left; returns it."""
    path = os.path.join(directory, "filler")
    chunk = b"\0" * 65536
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return path
                chunk = chunk[: len(chunk) // 2]


def gearman_submit_bg(port: int, function: bytes, data: bytes):
    """Sends one SUBMIT_JOB_BG; returns the reply's type and arguments."""
    body = function + b"\0" + b"\0" + data
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.sendall(b"\0REQ" + struct.pack(">II", 18, len(body)) + body)
        head = b""
        while len(head) < 12:
            head += s.recv(12 - len(head))
        kind, size = struct.unpack(">II", head[4:])
        rest = b""
        while len(rest) < size:
            rest += s.recv(size - len(rest))
    return kind, rest.split(b"\0")


class InThread:
    """Runs `call` on a thread; `result()` once it is done."""

    def __init__(self, call):
        self.value = None
        self.error = None
        self.thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self.thread.start()

    def _run(self, call):
        try:
            self.value = call()
        except BaseException as e:  # noqa: BLE001 - reported by result()
            self.error = e

    def done(self) -> bool:
        return not self.thread.is_alive()

    def result(self, timeout: float):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "still waiting"
        if self.error is not None:
            raise self.error
        return self.value


def test_a_full_postgresql_disk_refuses_new_jobs_and_loses_nothing(start_server, monkeypatch):
    if os.geteuid() != 0:
        pytest.fail(
            "this test mounts a tmpfs for a PostgreSQL tablespace, which needs root: run it "
            "as root (CI does)",
            pytrace=False,
        )
    pg = Postgres().start()
    mount = pg.root / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mount)],
                   check=True)
    servers = []
    try:
        space = mount / "space"
        space.mkdir()
        shutil.chown(space, user=PG_USER, group=PG_USER)
        pg.sql(f"CREATE TABLESPACE small LOCATION '{space}'")
        db = pg.create_database("disk_full")
        monkeypatch.setenv("PGPASSWORD", pg.password)
        gearman = free_port()
        args = ("--storage", pg.url(db), "--max-job-size", str(BIG_BODY * 2),
                "--gearman-listen", f"{HOST}:{gearman}")
        srv = start_server(extra_args=args)
        servers.append(srv)
        # `log` is partitioned by section: its partitions hold the rows (the parent's
        # tablespace is only where new partitions go).
        parts = pg.sql("SELECT inhrelid::regclass FROM pg_inherits "
                       "WHERE inhparent = 'jobyard.log'::regclass", db=db)
        for (part,) in parts:
            pg.sql(f"ALTER TABLE {part} SET TABLESPACE small", db=db)
        pg.sql("ALTER TABLE jobyard.log SET TABLESPACE small", db=db)
        with greenstalk.Client(srv.address) as client:
            before = [client.put(f"before-{i}") for i in range(5)]

        filler = fill(str(mount))
        # A put whose batch needs new pages: not acknowledged while the disk is full.
        big = os.urandom(BIG_BODY)
        waiting_put = InThread(lambda: greenstalk.Client(srv.address, encoding=None).put(big))
        wait_until(lambda: "PostgreSQL's disk is full" in srv.log_tail(200),
                   what="the server to notice the full disk")
        log = srv.log_tail(200)
        assert "no room for a new log segment" not in log, log
        with greenstalk.Client(srv.address) as client:
            with pytest.raises(greenstalk.OutOfMemoryError):
                client.put("refused while full")
        kind, reply = gearman_submit_bg(gearman, b"fn", b"refused while full")
        assert (kind, reply[0]) == (19, b"OUT_OF_MEMORY"), (kind, reply)  # ERROR
        # A delete of a job stored before: retried until there is room.
        deleting = InThread(lambda: greenstalk.Client(srv.address).delete(before[0]))
        time.sleep(1.0)
        assert srv.running(), srv.log_tail()
        assert not waiting_put.done(), "a put was acknowledged that PostgreSQL never stored"

        os.remove(filler)
        big_id = waiting_put.result(30)
        deleting.result(30)

        def accepted() -> bool:
            try:
                with greenstalk.Client(srv.address) as client:
                    client.put("after")
                return True
            except greenstalk.OutOfMemoryError:
                return False

        wait_until(accepted, what="new jobs to be accepted again")
        assert "has room for the log again" in srv.log_tail(200)

        # Every acknowledged change is in PostgreSQL: a restart finds exactly them.
        srv.stop()
        again = start_server(extra_args=args)
        servers.append(again)
        bodies = []
        with greenstalk.Client(again.address, encoding=None) as client:
            while True:
                try:
                    job = client.reserve(timeout=1)
                except greenstalk.TimedOutError:
                    break
                bodies.append((job.id, job.body))
                client.delete(job)
        assert sorted(b for _, b in bodies if b != big) == sorted(
            [f"before-{i}".encode() for i in range(1, 5)] + [b"after"]
        )
        assert [i for i, b in bodies if b == big] == [big_id]
    finally:
        for srv in servers:
            srv.stop()
        pg.stop()
        subprocess.run(["umount", str(mount)], check=False)
        pg.destroy()
