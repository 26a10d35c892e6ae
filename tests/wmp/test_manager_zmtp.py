"""The manager's own ZMTP 3.x ROUTER (crates/wmp/src/router.rs on the codecs of
crates/wmp-wire/src/zmtp), black-box against the real binary with raw TCP peers written
from RFC 23/37: bad greetings and lying frame lengths cut that peer off while a pyzmq
(libzmq) worker on the same manager keeps being served, and a PING is answered with a PONG
carrying its context."""

from __future__ import annotations

import socket
import struct
import time

import greenstalk
import pytest

from wmplib import Dealer, free_endpoint

GREETING_30 = b"\xff" + b"\x00" * 8 + b"\x7f\x03\x00" + b"NULL" + b"\x00" * 16 + b"\x00" + b"\x00" * 31
DEALER_READY = b"\x05READY\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"


@pytest.fixture
def manager(start_server):
    endpoint = free_endpoint()
    srv = start_server(extra_args=["--wmp-listen", endpoint, "--wmp-name", "m1"])
    srv.wmp = endpoint
    return srv


def connect(srv) -> socket.socket:
    host, port = srv.wmp[len("tcp://"):].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def read_until_closed(raw: socket.socket, timeout=10.0) -> bytes:
    """Everything the manager sends until it closes; fails if it does not close."""
    got = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        raw.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = raw.recv(4096)
        except ConnectionResetError:
            return got
        except socket.timeout:
            break
        if not chunk:
            return got
        got += chunk
    raise AssertionError(f"the manager kept the connection open (got {got[:80]!r})")


def read_exactly(raw: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = raw.recv(n - len(got))
        assert chunk, f"closed after {got!r}"
        got += chunk
    return got


def handshake(raw: socket.socket) -> None:
    """Greets as a ZMTP 3.0 DEALER and checks the manager's greeting and READY."""
    raw.sendall(GREETING_30)
    theirs = read_exactly(raw, 64)
    assert theirs[0] == 0xFF and theirs[9] == 0x7F and theirs[10] == 3, theirs
    assert theirs[12:16] == b"NULL"
    flags, size = read_exactly(raw, 2)
    assert flags == 0x04, "a command frame"
    body = read_exactly(raw, size)
    assert body.startswith(b"\x05READY") and b"Socket-Type\x00\x00\x00\x06ROUTER" in body
    raw.sendall(bytes([0x04, len(DEALER_READY)]) + DEALER_READY)


def assert_worker_still_served(srv, ctx, w: Dealer) -> None:
    bs = greenstalk.Client(srv.address, use="resize", watch="resize")
    job = bs.put(b"still here")
    take = w.take_one("resize")
    assert take.command == "TAKE" and take.headers["job"] == str(job)
    assert take.payload == b"still here"
    w.done(take)
    bs.close()


@pytest.mark.parametrize(
    "greeting",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        # ZMTP 1.0: a length byte, then an identity frame.
        b"\x01\x00",
        # ZMTP 2.0 announces revision 1.
        GREETING_30[:10] + b"\x01" + GREETING_30[11:],
        # ZMTP 3.2 (only 3.0 and 3.1 exist).
        GREETING_30[:11] + b"\x02" + GREETING_30[12:],
        # PLAIN mechanism.
        GREETING_30[:12] + b"PLAIN" + GREETING_30[17:],
    ],
    ids=["http", "zmtp1", "zmtp2", "zmtp3.2", "plain"],
)
def test_a_bad_greeting_is_cut_off_while_a_worker_is_served(manager, ctx, greeting):
    w = Dealer(ctx, manager.wmp)
    with connect(manager) as raw:
        raw.sendall(greeting)
        read_until_closed(raw)
    assert_worker_still_served(manager, ctx, w)
    assert manager.running()


def test_a_huge_frame_length_is_cut_off_before_any_allocation(manager, ctx):
    w = Dealer(ctx, manager.wmp)
    with connect(manager) as raw:
        handshake(raw)
        raw.sendall(b"\x02" + struct.pack(">Q", 1 << 62))  # a long frame header, no body
        read_until_closed(raw)
    with connect(manager) as raw:
        handshake(raw)
        # One byte over the frame limit: the largest job body (--max-job-size, 65535).
        raw.sendall(b"\x02" + struct.pack(">Q", 65536))
        read_until_closed(raw)
    assert_worker_still_served(manager, ctx, w)
    assert manager.running()


def test_a_non_ready_handshake_and_a_pub_peer_are_cut_off(manager, ctx):
    w = Dealer(ctx, manager.wmp)
    with connect(manager) as raw:
        raw.sendall(GREETING_30 + b"\x00\x05hello")
        read_until_closed(raw)
    with connect(manager) as raw:
        body = b"\x05READY\x0bSocket-Type" + struct.pack(">I", 3) + b"PUB"
        raw.sendall(GREETING_30 + bytes([0x04, len(body)]) + body)
        read_until_closed(raw)
    assert_worker_still_served(manager, ctx, w)


def test_ping_gets_a_pong_with_its_context_and_messages_still_flow(manager, ctx):
    with connect(manager) as raw:
        handshake(raw)
        ping = b"\x04PING" + struct.pack(">H", 0) + b"ctx-1"
        raw.sendall(bytes([0x04, len(ping)]) + ping)
        flags, size = read_exactly(raw, 2)
        assert flags == 0x04
        assert read_exactly(raw, size) == b"\x04PONGctx-1"
        # A WMP READY/GIVE over raw ZMTP gets a NO (no job waiting): the session is open.
        frames = [b"", b"WMP01", b"GIVE", b"lock=1\nroles=resize"]
        wire = b"".join(bytes([0x01 if i < len(frames) - 1 else 0, len(f)]) + f
                        for i, f in enumerate(frames))
        raw.sendall(wire)
        got = []
        while True:
            flags, size = read_exactly(raw, 2)
            assert flags & 0x06 == 0, "short message frames"
            got.append(read_exactly(raw, size))
            if not flags & 0x01:
                break
        assert got[:3] == [b"", b"WMP01", b"NO"], got


def test_libzmq_heartbeats_keep_an_idle_worker_connected(manager, ctx):
    """A pyzmq DEALER PINGing every 0.2 s that drops a peer silent for 0.6 s: only PONGs
    the manager gets right keep it connected through 3 idle seconds."""
    import zmq

    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.HEARTBEAT_IVL, 200)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 600)
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
    sock.connect(manager.wmp)
    events = []
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        if monitor.poll(100):
            event = monitor.recv_multipart()[0]
            events.append(struct.unpack("<H", event[:2])[0])
    assert events == [zmq.EVENT_HANDSHAKE_SUCCEEDED], events
    sock.send_multipart([b"", b"WMP01", b"GIVE", b"lock=1\nroles=resize"])
    assert sock.poll(5000), "no answer after the idle time"
    assert sock.recv_multipart()[2] == b"NO"
    monitor.close(linger=0)
    sock.close(linger=0)


def test_the_manager_pings_and_closes_a_peer_that_stays_silent(manager):
    """Heartbeat 5 s, timeout 15 s, as the manager's libzmq socket had."""
    with connect(manager) as raw:
        handshake(raw)
        raw.settimeout(8)
        flags, size = read_exactly(raw, 2)
        assert flags == 0x04
        assert read_exactly(raw, size) == b"\x04PING\x00\x00", "a PING with TTL 0"
        started = time.monotonic()
        rest = read_until_closed(raw, timeout=20)
        assert rest.replace(b"\x04\x07\x04PING\x00\x00", b"") == b"", "only more PINGs"
        assert time.monotonic() - started < 18


def test_a_second_peer_with_a_taken_identity_is_refused_the_first_keeps_it(manager, ctx):
    """libzmq's ROUTER rule (no ROUTER_HANDOVER): the newcomer is refused, so replies to
    that routing id still reach the first peer."""
    first = Dealer(ctx, manager.wmp, identity=b"w-dup")
    first.send("GIVE", b"lock=1\nroles=resize")
    assert first.recv().command == "NO"
    second = Dealer(ctx, manager.wmp, identity=b"w-dup")
    second.send("GIVE", b"lock=2\nroles=resize")
    assert not second.sock.poll(1000), "the duplicate was served"
    assert_worker_still_served(manager, ctx, first)
