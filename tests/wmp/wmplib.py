"""Helpers for WMP/1 tests with real libzmq peers (pyzmq): frame building and parsing,
a ROUTER that plays a manager, and starting `jobyard wmp-worker` / `jobyard wmp-device`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import zmq

SIG = b"WMP01"


def free_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def headers(**kv) -> bytes:
    return "\n".join(f"{k}={v}" for k, v in kv.items()).encode()


def parse_headers(frame: bytes) -> dict:
    out = {}
    for line in frame.decode().split("\n"):
        if line:
            k, _, v = line.partition("=")
            out[k] = v
    return out


class Msg:
    """A received message split at the delimiter."""

    def __init__(self, frames):
        i = frames.index(b"")
        self.path = frames[:i]
        assert frames[i + 1] == SIG, frames
        self.command = frames[i + 2].decode()
        self.headers = parse_headers(frames[i + 3])
        self.payload = frames[i + 4] if len(frames) > i + 4 else b""
        assert len(frames) <= i + 5, frames

    def __repr__(self):
        return f"Msg({self.path!r}, {self.command}, {self.headers}, {self.payload!r})"


def frames(path, command, hdrs=b"", payload=None):
    out = list(path) + [b"", SIG, command.encode(), hdrs]
    if payload is not None:
        out.append(payload)
    return out


class Router:
    """A pyzmq ROUTER: a manager (or the manager side of a test)."""

    def __init__(self, ctx, endpoint=None, name="m1"):
        self.endpoint = endpoint or free_endpoint()
        self.name = name
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(self.endpoint)

    def recv(self, timeout=5.0, skip=()) -> Msg:
        """Next message whose command is not in `skip` (e.g. skip READY retries)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sock.poll(int(left * 1000)):
                raise TimeoutError(f"{self.name}: no message within {timeout}s")
            m = Msg(self.sock.recv_multipart())
            if m.command not in skip:
                return m

    def quiet(self, seconds, skip=("READY",)):
        """Asserts nothing but `skip` arrives for `seconds`; returns what was skipped."""
        seen = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.sock.poll(int(left * 1000)):
                m = Msg(self.sock.recv_multipart())
                assert m.command in skip, f"unexpected {m}"
                seen.append(m)
        return seen

    def send(self, path, command, hdrs=b"", payload=None):
        self.sock.send_multipart(frames(path, command, hdrs, payload))

    def send_raw(self, parts):
        self.sock.send_multipart(parts)

    def take(self, path, lock, job, queue, body=b"", attempt=1, timeout=60000):
        self.send(
            path,
            "TAKE",
            headers(lock=lock, manager=self.name, job=job, attempt=attempt, queue=queue, timeout=timeout),
            body,
        )

    def run_job(self, path, queue, job, body, attempt=1):
        """WAKE → GIVE → TAKE; returns the DONE message."""
        self.send(path, "WAKE", headers(queue=queue, manager=self.name))
        give = self.recv(skip=("READY",))
        assert give.command == "GIVE", give
        assert give.path == path
        self.take(path, give.headers["lock"], job, queue, body, attempt)
        done = self.recv(skip=("READY",))
        assert done.command == "DONE", done
        return done

    def close(self):
        self.sock.close(0)


class Proc:
    """A jobyard wmp-worker or wmp-device process, stopped at teardown."""

    def __init__(self, argv, env=None):
        self.argv = argv
        self.p = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )

    def terminate(self, timeout=15.0) -> int:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise

    def output(self):
        out, err = self.p.communicate(timeout=10)
        return out.decode(errors="replace"), err.decode(errors="replace")

    def alive(self) -> bool:
        return self.p.poll() is None


class Dealer:
    """A pyzmq DEALER: a worker's connection to one manager (or device), written from
    docs/wmp.md with nothing of jobyard's own code."""

    def __init__(self, ctx, endpoint, identity=None):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if identity:
            self.sock.setsockopt(zmq.IDENTITY, identity)
        self.sock.connect(endpoint)

    def send(self, command, hdrs=b"", payload=None, path=()):
        self.sock.send_multipart(frames(path, command, hdrs, payload))

    def send_raw(self, parts):
        self.sock.send_multipart(parts)

    def recv(self, timeout=10.0, skip=()) -> Msg:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sock.poll(int(left * 1000)):
                raise TimeoutError(f"no message within {timeout}s")
            m = Msg(self.sock.recv_multipart())
            if m.command not in skip:
                return m

    def quiet(self, seconds) -> None:
        """Asserts nothing arrives for `seconds`."""
        if self.sock.poll(int(seconds * 1000)):
            raise AssertionError(f"unexpected {Msg(self.sock.recv_multipart())}")

    def take_one(self, queue, lock="1", timeout=10.0) -> Msg:
        """READY roles=queue, wait for WAKE, GIVE; returns the TAKE (or NO)."""
        self.send("READY", headers(roles=queue))
        return self.give_when_woken(queue, lock, timeout)

    def give_when_woken(self, queue, lock="1", timeout=10.0) -> Msg:
        """Waits for a WAKE for `queue`, answers GIVE; returns the TAKE (or NO)."""
        wake = self.recv(timeout)
        assert wake.command == "WAKE" and wake.headers["queue"] == queue, wake
        self.send("GIVE", headers(lock=lock, roles=queue, queue=queue))
        return self.recv(timeout)

    def done(self, take: Msg, status="ok", payload=b"", attempt=None, path=(), **extra):
        h = take.headers
        self.send(
            "DONE",
            headers(manager=h["manager"], job=h["job"], attempt=attempt or h["attempt"],
                    status=status, **extra),
            payload,
            path,
        )

    def close(self):
        self.sock.close(0)
