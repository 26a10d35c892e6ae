"""The Rust worker SDK (as `jobyard wmp-worker`) against pyzmq ROUTERs playing managers:
real libzmq on the other end of every socket."""

from __future__ import annotations

import time

from wmplib import headers


def worker(procs, jobyard_bin, connects, roles=("up",), command=("tr", "a-z", "A-Z"), *extra):
    argv = [jobyard_bin, "wmp-worker"]
    for c in connects:
        argv += ["--connect", c]
    for r in roles:
        argv += ["--role", r]
    argv += list(extra) + ["--", *command]
    return procs(argv)


def test_ready_announces_roles_with_empty_path_at_worker(routers, procs, jobyard_bin):
    m = routers()
    worker(procs, jobyard_bin, [m.endpoint], ("resize", "thumb"), ("cat",), "--name", "w-test")
    ready = m.recv()
    assert ready.command == "READY"
    assert len(ready.path) == 1  # only the ROUTER's id: the worker sent an empty path
    assert sorted(ready.headers["roles"].split(",")) == ["resize", "thumb"]
    assert ready.headers["worker"] == "w-test"
    assert ready.payload == b""


def test_wake_give_take_done_ok(routers, procs, jobyard_bin):
    m = routers()
    worker(procs, jobyard_bin, [m.endpoint])
    path = m.recv().path
    m.send(path, "WAKE", headers(queue="up", manager="m1"))
    give = m.recv(skip=("READY",))
    assert give.command == "GIVE"
    assert give.headers["queue"] == "up"
    assert give.headers["roles"] == "up"
    assert give.headers["lock"]
    m.take(path, give.headers["lock"], 41, "up", b"hello wmp", attempt=3)
    done = m.recv(skip=("READY",))
    assert done.command == "DONE"
    assert done.headers == {"manager": "m1", "job": "41", "attempt": "3", "status": "ok"}
    assert done.payload == b"HELLO WMP"
    assert done.path == path


def test_command_failure_is_done_fail_with_exit_code(routers, procs, jobyard_bin):
    m = routers()
    worker(procs, jobyard_bin, [m.endpoint], ("up",), ("sh", "-c", "echo broken >&2; exit 3"))
    path = m.recv().path
    done = m.run_job(path, "up", 5, b"x")
    assert done.headers["status"] == "fail"
    assert done.headers["error"] == "exit_3"
    assert done.payload == b"broken\n"


def test_wake_for_other_queue_is_ignored(routers, procs, jobyard_bin):
    m = routers()
    worker(procs, jobyard_bin, [m.endpoint])
    path = m.recv().path
    m.send(path, "WAKE", headers(queue="other"))
    m.quiet(0.5)
    # still serving its own queue
    assert m.run_job(path, "up", 1, b"a").headers["status"] == "ok"


def test_take_outside_roles_is_rejected(routers, procs, jobyard_bin):
    m = routers()
    worker(procs, jobyard_bin, [m.endpoint])
    path = m.recv().path
    m.take(path, "nolock", 9, "other", b"x")
    done = m.recv(skip=("READY",))
    assert done.headers["status"] == "reject"
    assert (done.headers["job"], done.headers["attempt"]) == ("9", "1")


def test_late_take_without_lock_runs_when_a_slot_is_free(routers, procs, jobyard_bin):
    m = routers()
    worker(procs, jobyard_bin, [m.endpoint])
    path = m.recv().path
    m.take(path, "expired-lock", 10, "up", b"late")
    done = m.recv(skip=("READY",))
    assert done.headers["status"] == "ok"
    assert done.payload == b"LATE"


def test_late_take_without_free_slot_is_rejected(routers, procs, jobyard_bin):
    m = routers()
    worker(procs, jobyard_bin, [m.endpoint], ("up",), ("sh", "-c", "sleep 2; cat"))
    path = m.recv().path
    m.take(path, "l1", 1, "up", b"slow")  # occupies the only slot
    m.take(path, "l2", 2, "up", b"more")
    done = m.recv(skip=("READY",))
    assert (done.headers["job"], done.headers["status"]) == ("2", "reject")
    done = m.recv(timeout=10, skip=("READY",))
    assert (done.headers["job"], done.headers["status"]) == ("1", "ok")


def test_lock_blocks_capacity_until_timeout_then_ready_again(routers, procs, jobyard_bin):
    m = routers()
    worker(procs, jobyard_bin, [m.endpoint], ("up",), ("cat",), "--lock-timeout-ms", "1500")
    path = m.recv().path
    m.send(path, "WAKE", headers(queue="up"))
    give = m.recv(skip=("READY",))
    assert give.command == "GIVE"
    # The only slot is locked: a second WAKE is ignored.
    m.send(path, "WAKE", headers(queue="up"))
    # After the lock times out the worker has room again and says READY.
    ready = m.recv(timeout=5)
    assert ready.command == "READY"
    m.send(path, "WAKE", headers(queue="up"))
    give2 = m.recv(skip=("READY",))
    assert give2.command == "GIVE"
    assert give2.headers["lock"] != give.headers["lock"]


def test_no_releases_the_lock(routers, procs, jobyard_bin):
    m = routers()
    worker(procs, jobyard_bin, [m.endpoint])
    path = m.recv().path
    m.send(path, "WAKE", headers(queue="up"))
    give = m.recv(skip=("READY",))
    m.send(path, "NO", headers(lock=give.headers["lock"]))
    ready = m.recv()
    assert ready.command == "READY"  # capacity came back from 0
    assert m.run_job(path, "up", 3, b"after no").payload == b"AFTER NO"


def test_concurrency_sends_ready_after_take(routers, procs, jobyard_bin):
    m = routers()
    worker(procs, jobyard_bin, [m.endpoint], ("up",), ("sh", "-c", "sleep 1; cat"), "--concurrency", "2")
    path = m.recv().path
    m.send(path, "WAKE", headers(queue="up"))
    give = m.recv(skip=("READY",))
    m.take(path, give.headers["lock"], 1, "up", b"one")
    # RFC "Multiple jobs": READY right after TAKE, before the job is processed.
    assert m.recv().command == "READY"
    m.send(path, "WAKE", headers(queue="up"))
    give2 = m.recv(skip=("READY",))
    m.take(path, give2.headers["lock"], 2, "up", b"two")
    dones = [m.recv(timeout=10, skip=("READY",)) for _ in range(2)]
    assert sorted(d.payload for d in dones) == [b"one", b"two"]


def test_two_managers_at_once(routers, procs, jobyard_bin):
    m1, m2 = routers(name="m1"), routers(name="m2")
    worker(procs, jobyard_bin, [m1.endpoint, m2.endpoint])
    p1, p2 = m1.recv().path, m2.recv().path
    d1 = m1.run_job(p1, "up", 1, b"from one")
    d2 = m2.run_job(p2, "up", 1, b"from two")
    assert (d1.headers["manager"], d1.payload) == ("m1", b"FROM ONE")
    assert (d2.headers["manager"], d2.payload) == ("m2", b"FROM TWO")


def test_ready_retry_while_manager_silent(routers, procs, jobyard_bin):
    m = routers()
    worker(procs, jobyard_bin, [m.endpoint], ("up",), ("cat",), "--ready-retry-max-ms", "400")
    first = m.recv()
    again = m.recv(timeout=5)
    assert first.command == again.command == "READY"


def test_reconnects_to_a_restarted_manager(ctx, routers, procs, jobyard_bin):
    m = routers()
    worker(procs, jobyard_bin, [m.endpoint], ("up",), ("cat",), "--ready-retry-max-ms", "300")
    m.recv()
    endpoint = m.endpoint
    m.close()
    time.sleep(0.5)
    m2 = routers(endpoint=endpoint, name="m1")
    ready = m2.recv(timeout=15)
    assert ready.command == "READY"
    assert m2.run_job(ready.path, "up", 8, b"again").payload == b"again"


def test_malformed_messages_are_ignored(routers, procs, jobyard_bin):
    m = routers()
    w = worker(procs, jobyard_bin, [m.endpoint])
    path = m.recv().path
    bad = [
        path + [b"WMP01", b"WAKE", b""],  # no delimiter
        path + [b"", b"WMP02", b"WAKE", b""],  # wrong version
        path + [b"", b"WMP01", b"FROB", b""],  # unknown command
        path + [b"", b"WMP01", b"WAKE"],  # no headers frame
        path + [b"", b"WMP01", b"WAKE", b"queue=up\nqueue=up"],  # duplicate key
        path + [b"", b"WMP01", b"WAKE", b"Queue=up"],  # bad key
        path + [b"", b"WMP01", b"WAKE", b"queue"],  # line without =
        path + [b"", b"WMP01", b"TAKE", headers(lock=1, manager="m", job="x", attempt=1, queue="up", timeout=1), b"b"],
        path + [b"", b"WMP01", b"TAKE", headers(lock=1, manager="m", job=1, attempt=1, queue="up", timeout=1), b"a", b"b"],
        path + [b"", b"WMP01", b"NO", b"x" * 9000],  # headers too large
    ]
    for parts in bad:
        m.send_raw(parts)
    m.quiet(0.7)
    assert w.alive()
    assert m.run_job(path, "up", 1, b"still fine").payload == b"STILL FINE"


def test_graceful_stop_finishes_running_job_first(routers, procs, jobyard_bin):
    m = routers()
    w = worker(procs, jobyard_bin, [m.endpoint], ("up",), ("sh", "-c", "sleep 1; cat"))
    path = m.recv().path
    m.send(path, "WAKE", headers(queue="up"))
    give = m.recv(skip=("READY",))
    m.take(path, give.headers["lock"], 77, "up", b"finish me")
    time.sleep(0.2)
    w.p.send_signal(15)
    done = m.recv(timeout=10, skip=("READY",))
    assert (done.headers["job"], done.headers["status"], done.payload) == ("77", "ok", b"finish me")
    assert w.p.wait(10) == 0


def test_take_while_stopping_is_rejected(routers, procs, jobyard_bin):
    m = routers()
    w = worker(procs, jobyard_bin, [m.endpoint], ("up",), ("sh", "-c", "sleep 3; cat"), "--concurrency", "2")
    path = m.recv().path
    m.take(path, "a", 1, "up", b"running")
    time.sleep(0.3)
    w.p.send_signal(15)
    time.sleep(0.7)
    m.take(path, "b", 2, "up", b"too late")
    got = {}
    for _ in range(2):
        d = m.recv(timeout=10, skip=("READY",))
        got[d.headers["job"]] = d.headers["status"]
    assert got == {"1": "ok", "2": "reject"}
    assert w.p.wait(10) == 0


def test_result_over_the_limit_fails_the_job(routers, procs, jobyard_bin):
    """The command worker keeps at most 64 MiB of stdout (MAX_RESULT); one byte more fails
    the job instead of growing the worker's memory."""
    m = routers()
    limit = 64 << 20
    worker(procs, jobyard_bin, [m.endpoint], ("up",), ("sh", "-c", 'head -c "$1" /dev/zero', "sh", str(limit + 1)))
    path = m.recv().path
    done = m.run_job(path, "up", 1, b"")
    assert (done.headers["status"], done.headers["error"]) == ("fail", "too_large")


def test_result_at_the_limit_is_delivered(routers, procs, jobyard_bin):
    m = routers()
    limit = 64 << 20
    worker(procs, jobyard_bin, [m.endpoint], ("up",), ("sh", "-c", 'head -c "$1" /dev/zero', "sh", str(limit)))
    path = m.recv().path
    m.send(path, "WAKE", headers(queue="up"))
    give = m.recv(skip=("READY",))
    m.take(path, give.headers["lock"], 1, "up", b"")
    done = m.recv(timeout=30, skip=("READY",))
    assert done.headers["status"] == "ok"
    assert len(done.payload) == limit
