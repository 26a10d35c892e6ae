"""examples/wmp_worker.py (the documented pyzmq worker) driven by a pyzmq ROUTER manager,
and through `jobyard wmp-device`."""

from __future__ import annotations

import sys
from pathlib import Path

from wmplib import free_endpoint, headers

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "wmp_worker.py"


def example(procs, connects, *extra):
    argv = [sys.executable, EXAMPLE]
    for c in connects:
        argv += ["--connect", c]
    return procs(argv + ["--role", "upper", *extra])


def test_example_runs_jobs_and_reports_failures(routers, procs):
    m = routers()
    example(procs, [m.endpoint])
    ready = m.recv(timeout=10)
    assert (ready.command, ready.headers["roles"]) == ("READY", "upper")
    done = m.run_job(ready.path, "upper", 1, b"hello")
    assert (done.headers["status"], done.payload) == ("ok", b"HELLO")
    done = m.run_job(ready.path, "upper", 2, b"fail please")
    assert (done.headers["status"], done.headers["error"]) == ("fail", "exception")
    assert done.payload == b"asked to fail"


def test_example_ignores_other_queues_and_rejects_foreign_take(routers, procs):
    m = routers()
    example(procs, [m.endpoint])
    path = m.recv(timeout=10).path
    m.send(path, "WAKE", headers(queue="other"))
    m.quiet(0.5)
    m.take(path, "x", 5, "other", b"no")
    done = m.recv(skip=("READY",))
    assert done.headers["status"] == "reject"


def test_example_lock_timeout_and_no(routers, procs):
    m = routers()
    example(procs, [m.endpoint], "--lock-timeout", "0.5")
    path = m.recv(timeout=10).path
    m.send(path, "WAKE", headers(queue="upper"))
    give = m.recv(skip=("READY",))
    m.send(path, "NO", headers(lock=give.headers["lock"]))
    assert m.recv().command == "READY"
    m.send(path, "WAKE", headers(queue="upper"))
    m.recv(skip=("READY",))
    # Unanswered: after the lock timeout the worker is READY again.
    assert m.recv(timeout=5).command == "READY"


def test_example_on_two_managers_through_a_device(routers, procs, jobyard_bin):
    m1, m2 = routers(name="m1"), routers(name="m2")
    listen = free_endpoint()
    procs([jobyard_bin, "wmp-device", "--listen", listen, "--upstream", m1.endpoint, "--upstream", m2.endpoint])
    example(procs, [listen], "--retry-max", "0.5")
    r1, r2 = m1.recv(timeout=10), m2.recv(timeout=10)
    assert m1.run_job(r1.path, "upper", 1, b"one").payload == b"ONE"
    assert m2.run_job(r2.path, "upper", 1, b"two").payload == b"TWO"
