"""`jobyard wmp-device` between pyzmq workers (DEALER) and pyzmq managers (ROUTER): the
alias-stack rule of docs/wmp.md, with one device and with two chained."""

from __future__ import annotations

import time

import zmq

from wmplib import Msg, free_endpoint, frames, headers


class PyWorker:
    """A hand-driven pyzmq DEALER worker."""

    def __init__(self, ctx, endpoint, identity=None):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if identity:
            self.sock.setsockopt(zmq.ROUTING_ID, identity)
        self.sock.connect(endpoint)

    def send(self, path, command, hdrs=b"", payload=None):
        self.sock.send_multipart(frames(path, command, hdrs, payload))

    def recv(self, timeout=5.0) -> Msg:
        if not self.sock.poll(int(timeout * 1000)):
            raise TimeoutError("worker: nothing received")
        return Msg(self.sock.recv_multipart())

    def nothing(self, seconds=0.5):
        assert not self.sock.poll(int(seconds * 1000)), "worker: unexpected message"


def device(procs, jobyard_bin, upstreams, listen=None):
    listen = listen or free_endpoint()
    argv = [jobyard_bin, "wmp-device", "--listen", listen]
    for u in upstreams:
        argv += ["--upstream", u]
    p = procs(argv)
    return listen, p


def ready_everywhere(worker, managers, deadline=10.0):
    """Sends READY until every manager has seen one (upstream connects are asynchronous);
    returns each manager's path for this worker."""
    paths = {}
    end = time.monotonic() + deadline
    while len(paths) < len(managers):
        assert time.monotonic() < end, "READY did not reach every manager"
        worker.send([], "READY", headers(roles="q"))
        for m in managers:
            if m.name in paths:
                continue
            try:
                msg = m.recv(timeout=0.3)
            except TimeoutError:
                continue
            assert msg.command == "READY"
            paths[m.name] = msg.path
    # Drain duplicate READYs from the retries above.
    for m in managers:
        m.quiet(0.3)
    return paths


def round_trip(worker, manager, path, job=1):
    """WAKE → GIVE → TAKE → DONE through the device(s); returns the worker's alias stack."""
    manager.send(path, "WAKE", headers(queue="q", manager=manager.name))
    wake = worker.recv()
    assert wake.command == "WAKE"
    assert wake.headers["manager"] == manager.name
    q = wake.path
    worker.send(q, "GIVE", headers(lock=f"L{job}", queue="q"))
    give = manager.recv()
    assert give.command == "GIVE" and give.path == path
    manager.take(path, give.headers["lock"], job, "q", b"body")
    take = worker.recv()
    assert take.command == "TAKE" and take.path == q and take.payload == b"body"
    worker.send(q, "DONE", headers(manager=manager.name, job=job, attempt=1, status="ok"), b"result")
    done = manager.recv()
    assert done.command == "DONE" and done.path == path and done.payload == b"result"
    return q


def test_ready_fans_out_and_replies_find_their_manager(ctx, routers, procs, jobyard_bin):
    m1, m2 = routers(name="m1"), routers(name="m2")
    listen, _ = device(procs, jobyard_bin, [f"a1={m1.endpoint}", f"a2={m2.endpoint}"])
    w = PyWorker(ctx, listen, b"w1")
    paths = ready_everywhere(w, [m1, m2])
    for p in paths.values():
        assert len(p) == 2 and p[1] == b"w1"  # [device id, worker id]
    assert round_trip(w, m1, paths["m1"], job=1) == [b"a1"]
    assert round_trip(w, m2, paths["m2"], job=2) == [b"a2"]
    # Nothing leaked to the other manager.
    m1.quiet(0.3, skip=())
    m2.quiet(0.3, skip=())


def test_default_aliases_and_two_workers(ctx, routers, procs, jobyard_bin):
    m1, m2 = routers(name="m1"), routers(name="m2")
    listen, _ = device(procs, jobyard_bin, [m1.endpoint, m2.endpoint])
    w1, w2 = PyWorker(ctx, listen, b"w1"), PyWorker(ctx, listen, b"w2")
    p1 = ready_everywhere(w1, [m1, m2])
    p2 = ready_everywhere(w2, [m1, m2])
    assert p1["m1"] != p2["m1"]
    assert round_trip(w1, m2, p1["m2"], job=1) == [b"u1"]
    assert round_trip(w2, m1, p2["m1"], job=2) == [b"u0"]
    w1.nothing(0.3)


def test_two_devices_chained(ctx, routers, procs, jobyard_bin):
    m1, m2 = routers(name="m1"), routers(name="m2")
    upper, _ = device(procs, jobyard_bin, [m1.endpoint, m2.endpoint])
    lower, _ = device(procs, jobyard_bin, [upper])
    w = PyWorker(ctx, lower, b"w1")
    paths = ready_everywhere(w, [m1, m2])
    for p in paths.values():
        assert len(p) == 3 and p[2] == b"w1"  # [upper id, lower id, worker]
    # Worker sees the stack [upper's alias for the manager, lower's alias for upper]: the
    # nearest device's alias is last, and that device pops it on the way back.
    assert round_trip(w, m1, paths["m1"], job=1) == [b"u0", b"u0"]
    assert round_trip(w, m2, paths["m2"], job=2) == [b"u1", b"u0"]


def test_bad_messages_are_dropped_and_device_keeps_working(ctx, routers, procs, jobyard_bin):
    m = routers(name="m1")
    listen, dev = device(procs, jobyard_bin, [m.endpoint])
    w = PyWorker(ctx, listen, b"w1")
    path = ready_everywhere(w, [m])["m1"]
    w.sock.send_multipart([b"WMP01", b"GIVE", b"lock=1"])  # no delimiter
    w.send([], "GIVE", headers(lock=1))  # not READY and no alias
    w.send([b"nope"], "GIVE", headers(lock=1))  # unknown alias
    w.sock.send_multipart([b"u0", b"", b"WMP02", b"GIVE", b"lock=1"])  # wrong version
    w.sock.send_multipart([b"x"] * 20 + [b"", b"WMP01", b"READY", b""])  # path too long
    m.quiet(0.7, skip=())
    # From above: a message with no path at all cannot go anywhere.
    m.send_raw([path[0], b"", b"WMP01", b"WAKE", b""])
    w.nothing(0.3)
    assert dev.alive()
    assert round_trip(w, m, path, job=5) == [b"u0"]


def test_unknown_commands_are_routed_unchanged(ctx, routers, procs, jobyard_bin):
    """A device does not parse commands beyond READY: extensions (STATUS, CANCEL, future
    ones) pass through."""
    m = routers(name="m1")
    listen, _ = device(procs, jobyard_bin, [m.endpoint])
    w = PyWorker(ctx, listen, b"w1")
    path = ready_everywhere(w, [m])["m1"]
    w.send([b"u0"], "STATUS", headers(manager="m1", job=1, attempt=1, num=1, den=2))
    got = m.recv()
    assert (got.command, got.path, got.headers["num"]) == ("STATUS", path, "1")
    m.send(path, "CANCEL", headers(manager="m1", job=1, attempt=1))
    got = w.recv()
    assert (got.command, got.path) == ("CANCEL", [b"u0"])


def test_device_reconnects_to_a_restarted_manager(ctx, routers, procs, jobyard_bin):
    m = routers(name="m1")
    endpoint = m.endpoint
    listen, _ = device(procs, jobyard_bin, [endpoint])
    w = PyWorker(ctx, listen, b"w1")
    ready_everywhere(w, [m])
    m.close()
    time.sleep(0.3)
    m2 = routers(endpoint=endpoint, name="m1")
    path = ready_everywhere(w, [m2], deadline=20.0)["m1"]
    assert round_trip(w, m2, path, job=9) == [b"u0"]


def test_rust_worker_through_device_to_two_managers(ctx, routers, procs, jobyard_bin):
    """Both of our own pieces together, with pyzmq managers: SDK worker → device → 2 managers."""
    m1, m2 = routers(name="m1"), routers(name="m2")
    listen, _ = device(procs, jobyard_bin, [m1.endpoint, m2.endpoint])
    procs([jobyard_bin, "wmp-worker", "--connect", listen, "--role", "q", "--ready-retry-max-ms", "500", "--", "cat"])
    r1 = m1.recv(timeout=10)
    r2 = m2.recv(timeout=10)
    assert r1.command == r2.command == "READY"
    for m, r, body in ((m1, r1, b"one"), (m2, r2, b"two")):
        done = m.run_job(r.path, "q", 3, body)
        assert (done.headers["manager"], done.headers["status"], done.payload) == (m.name, "ok", body)


def test_peer_announcing_a_huge_frame_is_cut_off_not_fatal(ctx, routers, procs, jobyard_bin):
    """80 bytes of raw ZMTP claiming a 2^62-byte frame: the pure-Rust `zeromq` crate
    allocates what is claimed and aborts the process; libzmq's ZMQ_MAXMSGSIZE disconnects
    the peer. The device must survive and keep forwarding."""
    import socket
    import struct

    m = routers(name="m1")
    listen, dev = device(procs, jobyard_bin, [m.endpoint])
    w = PyWorker(ctx, listen, b"w1")
    path = ready_everywhere(w, [m])["m1"]
    host, port = listen[len("tcp://") :].rsplit(":", 1)
    with socket.create_connection((host, int(port))) as raw:
        # ZMTP 3.0 greeting (NULL mechanism), then a READY command naming a DEALER.
        raw.sendall(b"\xff" + b"\x00" * 8 + b"\x7f\x03\x00" + b"NULL" + b"\x00" * 16 + b"\x00" + b"\x00" * 31)
        assert len(raw.recv(64)) > 0
        body = b"\x05READY\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
        raw.sendall(bytes([0x04, len(body)]) + body)
        time.sleep(0.2)
        raw.sendall(b"\x02" + struct.pack(">Q", 1 << 62))  # long frame header, no body
        time.sleep(0.5)
    assert dev.alive()
    assert round_trip(w, m, path, job=11) == [b"u0"]
