"""Listening the ways beanstalkd's service files do: UNIX sockets (`-l unix:PATH`,
`--beanstalk-listen unix:PATH`) and systemd socket activation (LISTEN_PID/LISTEN_FDS), judged
by greenstalk (PyPI) against the real binary.

Socket activation is reproduced as systemd does it: the listening socket is created by
another process (this test), placed at descriptor 3 (and 4, ...), and the server is exec'd
with LISTEN_PID set to its own pid.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import time

import greenstalk
import pytest

from jobyard_testlib import HOST, free_port, other_listeners_off

START_TIMEOUT = 60.0


@pytest.fixture
def spawn(jobyard_bin):
    procs = []

    def run(args, pass_fds=(), env=None):
        p = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=pass_fds,
            env={**os.environ, **(env or {})},
        )
        procs.append(p)
        return p

    yield run
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=20)
        if p.stderr:
            p.stderr.close()


def client_when_up(address, proc, timeout=START_TIMEOUT) -> greenstalk.Client:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}: {proc.stderr.read()!r}")
        try:
            c = greenstalk.Client(address)
            c._sock.settimeout(30)
            return c
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def round_trip(c: greenstalk.Client, body: str) -> None:
    jid = c.put(body)
    job = c.reserve(timeout=5)
    assert (job.id, job.body) == (jid, body)
    c.delete(job)


def stop(proc) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=20)


def test_serve_on_a_unix_socket(spawn, jobyard_bin, tmp_path):
    sock = tmp_path / "bs.sock"
    proc = spawn(
        [str(jobyard_bin), "serve", "--data-dir", str(tmp_path / "data"), "--fsync", "never",
         "--beanstalk-listen", f"unix:{sock}", *other_listeners_off(str(jobyard_bin))]
    )
    c = client_when_up(str(sock), proc)
    round_trip(c, "over a UNIX socket")
    c.put("kept")
    assert c.stats()["current-jobs-ready"] == 1
    c.close()
    assert stop(proc) == 0
    assert not sock.exists(), "a clean shutdown removes the socket file it created"

    # Restarted on the same path (as after a crash that left the file): the job is there.
    proc = spawn(
        [str(jobyard_bin), "serve", "--data-dir", str(tmp_path / "data"), "--fsync", "never",
         "--beanstalk-listen", f"unix:{sock}", *other_listeners_off(str(jobyard_bin))]
    )
    c = client_when_up(str(sock), proc)
    assert c.reserve(timeout=5).body == "kept"
    c.close()
    proc.kill()
    proc.wait(timeout=20)
    assert sock.exists(), "kill -9 leaves the file; the next start replaces it"
    proc = spawn([str(jobyard_bin), "beanstalkd", "-l", f"unix:{sock}", "-p", "1"])
    round_trip(client_when_up(str(sock), proc), "after a crash")


def test_beanstalkd_command_line_unix_socket_refuses_a_regular_file(spawn, jobyard_bin, tmp_path):
    path = tmp_path / "not-a-socket"
    path.write_text("precious")
    proc = spawn([str(jobyard_bin), "beanstalkd", "-l", f"unix:{path}"])
    assert proc.wait(timeout=60) == 111
    assert path.read_text() == "precious"


def activated(jobyard_bin, args, sockets, names=None):
    """argv and fds that start the server as systemd would, with `sockets` at fds 3, 4, ..."""
    dups = " ".join(f"{3 + i}<&{s.fileno()}" for i, s in enumerate(sockets))
    env = f"export LISTEN_PID=$$ LISTEN_FDS={len(sockets)}"
    if names:
        env += f" LISTEN_FDNAMES={':'.join(names)}"
    script = f'exec {dups}; {env}; exec "$@"'
    argv = ["bash", "-c", script, "bash", str(jobyard_bin), *args]
    return argv, tuple(s.fileno() for s in sockets)


def tcp_listener() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((HOST, 0))
    s.listen(64)
    return s


def gearman_echo(port: int, payload: bytes) -> bytes:
    """ECHO_REQ over Gearman's binary protocol; returns the ECHO_RES payload."""
    with socket.create_connection((HOST, port), timeout=30) as s:
        s.sendall(b"\0REQ" + struct.pack(">II", 16, len(payload)) + payload)
        head = b""
        while len(head) < 12:
            head += s.recv(12 - len(head))
        magic, kind, size = head[:4], *struct.unpack(">II", head[4:])
        assert (magic, kind) == (b"\0RES", 17)
        body = b""
        while len(body) < size:
            body += s.recv(size - len(body))
        return body


def test_socket_activation_replaces_the_configured_address(spawn, jobyard_bin, tmp_path):
    lst = tcp_listener()
    port = lst.getsockname()[1]
    configured = free_port()
    argv, fds = activated(
        jobyard_bin,
        ["beanstalkd", "-l", HOST, "-p", str(configured), "-b", str(tmp_path / "data")],
        [lst],
        names=["beanstalkd.socket"],  # systemd's default name: the socket unit's
    )
    proc = spawn(argv, pass_fds=fds)
    lst.close()  # the server holds its own copy, as with systemd
    c = client_when_up((HOST, port), proc)
    round_trip(c, "through an activated socket")
    with pytest.raises(OSError):
        socket.create_connection((HOST, configured), timeout=2).close()
    c.close()
    assert stop(proc) == 0


def test_socket_activation_by_name_for_both_protocols(spawn, jobyard_bin, tmp_path):
    gearman, beanstalk = tcp_listener(), tcp_listener()
    gport, bport = gearman.getsockname()[1], beanstalk.getsockname()[1]
    unix_path = tmp_path / "activated.sock"
    extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    extra.bind(str(unix_path))
    extra.listen(8)
    argv, fds = activated(
        jobyard_bin,
        ["serve", "--data-dir", str(tmp_path / "data"), "--fsync", "never",
         "--beanstalk-listen", f"{HOST}:{free_port()}", "--gearman-listen", f"{HOST}:{free_port()}"],
        [gearman, beanstalk, extra],
        names=["gearman", "beanstalk", "spare"],
    )
    proc = spawn(argv, pass_fds=fds)
    for s in (gearman, beanstalk, extra):
        s.close()
    c = client_when_up((HOST, bport), proc)
    round_trip(c, "named socket")
    assert gearman_echo(gport, b"hello") == b"hello"
    c.close()
    assert stop(proc) == 0
    assert unix_path.exists(), "an activated socket's file belongs to systemd, not to us"


def test_a_protocol_without_an_activated_socket_uses_its_address(spawn, jobyard_bin, tmp_path):
    gearman = tcp_listener()
    gport = gearman.getsockname()[1]
    bport = free_port()
    argv, fds = activated(
        jobyard_bin,
        ["serve", "--data-dir", str(tmp_path / "data"), "--fsync", "never",
         "--beanstalk-listen", f"{HOST}:{bport}", "--gearman-listen", f"{HOST}:{free_port()}"],
        [gearman],
        names=["gearman"],
    )
    proc = spawn(argv, pass_fds=fds)
    gearman.close()
    c = client_when_up((HOST, bport), proc)
    round_trip(c, "configured address")
    assert gearman_echo(gport, b"activated") == b"activated"
    c.close()
    assert stop(proc) == 0


def test_socket_activation_of_a_unix_socket(spawn, jobyard_bin, tmp_path):
    path = tmp_path / "unit.sock"
    lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lst.bind(str(path))
    lst.listen(8)
    argv, fds = activated(jobyard_bin, ["beanstalkd"], [lst])
    proc = spawn(argv, pass_fds=fds)
    lst.close()
    round_trip(client_when_up(str(path), proc), "activated UNIX socket")


def test_activation_meant_for_another_process_is_ignored(spawn, jobyard_bin, tmp_path):
    port = free_port()
    proc = spawn(
        [str(jobyard_bin), "beanstalkd", "-l", HOST, "-p", str(port)],
        env={"LISTEN_PID": "1", "LISTEN_FDS": "1"},
    )
    round_trip(client_when_up((HOST, port), proc), "own socket")
