"""Shared helpers for the black-box tests: running a real jobyard server and talking to it.

No mocks: every helper here starts the real binary or speaks the real protocol over TCP.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"

# Generous: a loaded 2-core machine can take a while to start a debug build and replay a log.
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0


def binary_path() -> Path:
    """The server binary: $JOBYARD_BIN, else target/debug/jobyard under the repo root."""
    env = os.environ.get("JOBYARD_BIN")
    path = Path(env) if env else REPO / "target" / "debug" / "jobyard"
    if not path.is_absolute():
        path = REPO / path
    return path


@functools.lru_cache(maxsize=None)
def other_listeners_off(binary: str) -> Tuple[str, ...]:
    """`--<proto>-listen off` for every listener the binary has besides beanstalk, so that
    a test server never binds another protocol's default port (and never collides with
    another server on it)."""
    out = subprocess.run(
        [binary, "serve", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    flags = sorted(set(re.findall(r"(--[a-z0-9-]+-listen)\b", out)) - {"--beanstalk-listen"})
    return tuple(x for flag in flags for x in (flag, "off"))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def data_files(data_dir: Path) -> List[Path]:
    """The log segments and snapshots jobyard keeps in a data directory."""
    return sorted(
        p
        for p in Path(data_dir).iterdir()
        if (p.name.startswith("seg-") and p.name.endswith(".log"))
        or (p.name.startswith("snap-") and p.name.endswith(".snap"))
    )


def data_bytes(data_dir: Path) -> int:
    total = 0
    for p in data_files(data_dir):
        try:
            total += p.stat().st_size
        except FileNotFoundError:  # removed by compaction while we looked
            pass
    return total


class ServerError(AssertionError):
    pass


class Server:
    """One real `jobyard serve` process on a loopback port with its own data directory.

    `restart()` keeps the data directory; `kill9()` crashes it; `stop()` is a clean SIGTERM.
    """

    def __init__(
        self,
        binary: Path,
        data_dir: Path,
        log_dir: Path,
        fsync: str = "always",
        extra_args: Sequence[str] = (),
    ):
        self.binary = Path(binary)
        self.data_dir = Path(data_dir)
        self.log_dir = Path(log_dir)
        self.fsync = fsync
        self.extra_args = list(extra_args)
        self.proc: Optional[subprocess.Popen] = None
        self.port: Optional[int] = None
        self.starts = 0
        self._log_file = None
        self.log_path: Optional[Path] = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def address(self) -> Tuple[str, int]:
        assert self.port is not None, "server not started"
        return (HOST, self.port)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, port: Optional[int] = None) -> "Server":
        assert not self.running(), "already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        last_error = ""
        # The port is free when chosen but another process could take it before we bind:
        # try a few ports before giving up.
        for attempt in range(5):
            want = port if (port is not None and attempt == 0) else free_port()
            if self._try_start(want):
                return self
            last_error = self.log_tail()
            if "cannot listen" not in last_error and "Address already in use" not in last_error:
                break
        raise ServerError(f"jobyard did not start; log tail:\n{last_error}")

    def _try_start(self, port: int) -> bool:
        self.starts += 1
        self.log_path = self.log_dir / f"jobyard-{id(self):x}-{self.starts}.log"
        self._log_file = open(self.log_path, "wb")
        cmd = [
            str(self.binary),
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--beanstalk-listen",
            f"{HOST}:{port}",
            "--fsync",
            self.fsync,
            # a listener the test configures itself is not turned off
            *(
                arg
                for flag, off in zip(*[iter(other_listeners_off(str(self.binary)))] * 2)
                if flag not in self.extra_args
                for arg in (flag, off)
            ),
            *self.extra_args,
        ]
        env = dict(os.environ)
        env.setdefault("JOBYARD_LOG", "info")
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
        )
        self.port = port
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._close_log()
                return False
            if self._answers():
                return True
            time.sleep(0.05)
        self.kill9()
        raise ServerError(
            f"jobyard did not accept connections within {START_TIMEOUT}s; log tail:\n"
            + self.log_tail()
        )

    def _answers(self) -> bool:
        try:
            with socket.create_connection(self.address, timeout=2) as s:
                s.settimeout(5)
                s.sendall(b"list-tube-used\r\n")
                buf = b""
                while not buf.endswith(b"\r\n"):
                    chunk = s.recv(256)
                    if not chunk:
                        return False
                    buf += chunk
                return buf.startswith(b"USING ")
        except OSError:
            return False

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it does not exit in time. Returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT)
        self._close_log()
        return self.proc.returncode

    def kill9(self) -> None:
        """Crash the server: SIGKILL, no chance to flush anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=STOP_TIMEOUT)
        self._close_log()

    def restart(self, crash: bool = False) -> "Server":
        """Stops (or crashes) the server and starts it again on the same data directory,
        on the same port if it is still free."""
        port = self.port
        if crash:
            self.kill9()
        else:
            self.stop()
        return self.start(port=port)

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


# -- a minimal raw protocol client, used where bulk or pipelined inspection is needed -------


class Raw:
    """Raw beanstalkd protocol over one socket, with pipelining for bulk inspection."""

    def __init__(self, address: Tuple[str, int], timeout: float = 60.0):
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Raw":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def chunk(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            self._fill()
        data, rest = self.buf[:n], self.buf[n:]
        assert rest[:2] == b"\r\n", rest[:10]
        self.buf = rest[2:]
        return data

    def cmd(self, line: str) -> bytes:
        self.sock.sendall(line.encode() + b"\r\n")
        return self.line()

    def put(self, body: bytes, pri: int = 100, delay: int = 0, ttr: int = 60) -> int:
        self.sock.sendall(b"put %d %d %d %d\r\n%b\r\n" % (pri, delay, ttr, len(body), body))
        reply = self.line()
        assert reply.startswith(b"INSERTED "), reply
        return int(reply.split()[1])

    def stats(self) -> Dict[str, str]:
        reply = self.cmd("stats")
        assert reply.startswith(b"OK "), reply
        return parse_yaml_dict(self.chunk(int(reply.split()[1])))

    def jobs(self, ids: Iterable[int], batch: int = 400) -> Dict[int, dict]:
        """Peeks and stats every id (pipelined). Returns {id: {body, state, tube, pri}} for
        the ids that exist."""
        ids = list(ids)
        found: Dict[int, dict] = {}
        for i in range(0, len(ids), batch):
            part = ids[i : i + batch]
            self.sock.sendall(b"".join(b"peek %d\r\nstats-job %d\r\n" % (j, j) for j in part))
            for j in part:
                peek = self.line()
                body = None
                if peek.startswith(b"FOUND "):
                    _, pid, size = peek.split()
                    assert int(pid) == j, (peek, j)
                    body = self.chunk(int(size))
                else:
                    assert peek == b"NOT_FOUND", peek
                st = self.line()
                stats = None
                if st.startswith(b"OK "):
                    stats = parse_yaml_dict(self.chunk(int(st.split()[1])))
                else:
                    assert st == b"NOT_FOUND", st
                assert (body is None) == (stats is None), (j, peek, st)
                if body is not None:
                    found[j] = {
                        "body": body,
                        "state": stats["state"],
                        "tube": stats["tube"],
                        "pri": int(stats["pri"]),
                    }
        return found


def parse_yaml_dict(data: bytes) -> Dict[str, str]:
    text = data.decode()
    assert text.startswith("---\n"), text[:20]
    out = {}
    for line in text[4:].splitlines():
        k, v = line.split(": ", 1)
        out[k] = v.strip('"')
    return out


def total_jobs(stats: Dict[str, str]) -> int:
    return sum(
        int(stats[f"current-jobs-{s}"]) for s in ("ready", "reserved", "delayed", "buried")
    )


LISTEN_BACKLOG = 4096  # crates/net/src/listen.rs


def expected_backlog() -> int:
    """The backlog every jobyard listener gets: 4096, capped by net.core.somaxconn."""
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    return min(LISTEN_BACKLOG, somaxconn)


def listen_backlog(port: int) -> int:
    """The backlog of the socket listening on `port` (`ss -ltn`'s Send-Q)."""
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    lines = out.splitlines()
    assert lines, f"nothing listens on {port}"
    return int(lines[0].split()[2])
