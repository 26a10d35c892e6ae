#!/usr/bin/env python3
"""A complete 14/WMP worker in Python with pyzmq, written against docs/wmp.md.

It connects one DEALER per manager (or device), announces READY with its roles, answers
WAKE with GIVE (holding one lock), runs the job on TAKE and reports DONE, then asks for the
next job at once when the TAKE said `more=1` (a hot GIVE). One job at a time, in the calling
thread: the smallest worker that follows every rule (lock timeout, READY retries with
backoff, late TAKE, NO, hot GIVE). Replace `handle` with your own work.

    python3 examples/wmp_worker.py --connect tcp://127.0.0.1:5570 --role upper
"""

from __future__ import annotations

import argparse
import itertools
import random
import time

import zmq

SIGNATURE = b"WMP01"


def handle(queue: str, body: bytes) -> bytes:
    """The work: upper-cases the body. Raise to report `status=fail`."""
    if body.startswith(b"fail"):
        raise RuntimeError("asked to fail")
    return body.upper()


def encode_headers(**fields) -> bytes:
    return "\n".join(f"{k}={v}" for k, v in fields.items() if v is not None).encode()


def decode(frames):
    """Returns (path, command, headers, payload), or None for anything malformed."""
    try:
        d = frames.index(b"")
    except ValueError:
        return None
    rest = frames[d + 1 :]
    if d > 16 or len(rest) < 3 or len(rest) > 4 or rest[0] != SIGNATURE:
        return None
    headers = {}
    text = rest[2].decode("utf-8", "replace")
    for line in text.split("\n") if text.strip("\n") else []:
        key, sep, value = line.partition("=")
        if not sep or not key or key in headers:
            return None
        headers[key] = value
    payload = rest[3] if len(rest) == 4 else b""
    return frames[:d], rest[1].decode("ascii", "replace"), headers, payload


class Worker:
    def __init__(self, endpoints, roles, lock_timeout=5.0, retry_max=30.0):
        self.ctx = zmq.Context.instance()
        self.roles = roles
        self.lock_timeout = lock_timeout
        self.retry_max = retry_max
        self.socks = []
        for ep in endpoints:
            s = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 1000)
            s.connect(ep)
            self.socks.append(s)
        self.backoff = {s: 1.0 for s in self.socks}
        self.retry_at = {s: 0.0 for s in self.socks}
        self.lock = None  # (token, socket, deadline): our one slot, reserved for one manager
        self.hot_lock = None  # the token of a GIVE sent after a DONE (worker rule 5)
        self.tokens = itertools.count(1)
        self.running = True

    def send(self, sock, path, command, headers=b"", payload=None):
        frames = list(path) + [b"", SIGNATURE, command.encode(), headers]
        if payload:
            frames.append(payload)
        sock.send_multipart(frames)

    def ready(self, sock):
        self.send(sock, [], "READY", encode_headers(roles=",".join(self.roles)))
        jitter = random.uniform(0.8, 1.2)
        self.retry_at[sock] = time.monotonic() + self.backoff[sock] * jitter
        self.backoff[sock] = min(self.backoff[sock] * 2, self.retry_max)

    def ready_all(self):
        for s in self.socks:
            self.backoff[s] = 1.0
            self.ready(s)

    def run(self):
        poller = zmq.Poller()
        for s in self.socks:
            poller.register(s, zmq.POLLIN)
        self.ready_all()
        while self.running:
            now = time.monotonic()
            if self.lock and now >= self.lock[2]:
                self.lock = None  # the manager never answered: free the slot
                self.ready_all()
            if not self.lock:
                for s in self.socks:
                    if now >= self.retry_at[s]:
                        self.ready(s)
            for sock, _ in poller.poll(100):
                msg = decode(sock.recv_multipart())
                if msg is None:
                    continue  # never answer a malformed message
                self.backoff[sock] = 1.0
                self.retry_at[sock] = time.monotonic() + 1.0
                self.on_message(sock, *msg)

    def on_message(self, sock, path, command, headers, payload):
        if command == "WAKE":
            queue = headers.get("queue")
            if self.lock or (queue is not None and queue not in self.roles):
                return
            token = str(next(self.tokens))
            self.lock = (token, sock, time.monotonic() + self.lock_timeout)
            self.send(sock, path, "GIVE", encode_headers(lock=token, roles=",".join(self.roles), queue=queue))
        elif command == "NO":
            if self.lock and self.lock[0] == headers.get("lock") and self.lock[1] is sock:
                self.lock = None
                self.ready_all()
        elif command == "TAKE":
            self.on_take(sock, path, headers, payload)

    def on_take(self, sock, path, h, body):
        try:
            manager, job, attempt, queue = h["manager"], h["job"], h["attempt"], h["queue"]
        except KeyError:
            return  # malformed: drop
        mine = self.lock and self.lock[0] == h.get("lock") and self.lock[1] is sock
        from_hot = bool(mine) and self.hot_lock == h.get("lock")
        if mine:
            self.lock = None
        done = dict(manager=manager, job=job, attempt=attempt)
        if queue not in self.roles or (self.lock and not mine):
            self.send(sock, path, "DONE", encode_headers(**done, status="reject"))
            return
        try:
            result = handle(queue, body)
            self.send(sock, path, "DONE", encode_headers(**done, status="ok"), result)
        except Exception as e:  # the job failed, the worker did not
            self.send(sock, path, "DONE", encode_headers(**done, status="fail", error="exception"), str(e).encode())
        # Worker rule 5: the manager said it has more, so ask it again right away (DONE and
        # GIVE travel together). If another manager may be reachable (a second socket, or a
        # device on the path), every second job goes back to READY so none is shut out.
        others = len(self.socks) > 1 or len(path) > 0
        if h.get("more") == "1" and self.running and not (from_hot and others):
            token = str(next(self.tokens))
            self.lock = (token, sock, time.monotonic() + self.lock_timeout)
            self.hot_lock = token
            self.send(sock, path, "GIVE", encode_headers(lock=token, roles=",".join(self.roles), queue=queue))
        else:
            self.ready_all()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connect", action="append", required=True, help="manager or device endpoint (repeat)")
    ap.add_argument("--role", action="append", required=True, help="queue to serve (repeat)")
    ap.add_argument("--lock-timeout", type=float, default=5.0, help="seconds a lock waits for TAKE or NO")
    ap.add_argument("--retry-max", type=float, default=30.0, help="longest READY retry interval, seconds")
    args = ap.parse_args()
    try:
        Worker(args.connect, args.role, args.lock_timeout, args.retry_max).run()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
