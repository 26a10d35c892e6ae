"""The hot GIVE (docs/wmp.md, worker rule 5 and decision 15), black-box on both sides:
jobyard's manager against pyzmq DEALERs written from the document, and the Rust SDK
(`jobyard wmp-worker`) and examples/wmp_worker.py against a pyzmq ROUTER playing manager."""

from __future__ import annotations

import sys
from pathlib import Path

import greenstalk
import pytest

from wmplib import Dealer, free_endpoint, headers

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "wmp_worker.py"


@pytest.fixture
def manager(start_server):
    endpoint = free_endpoint()
    srv = start_server(extra_args=["--wmp-listen", endpoint, "--wmp-name", "m1"])
    srv.wmp = endpoint
    return srv


def beanstalk(srv):
    return greenstalk.Client(srv.address, use="resize", watch="resize")


def give(w, lock):
    w.send("GIVE", headers(lock=lock, roles="resize", queue="resize"))
    return w.recv()


# -- the manager ---------------------------------------------------------------------------


def test_a_give_that_answers_no_wake_is_served_and_take_says_whether_more_is_ready(manager, ctx):
    bs = beanstalk(manager)
    first, second = bs.put(b"one"), bs.put(b"two")
    w = Dealer(ctx, manager.wmp)
    take = give(w, "1")  # no READY, no WAKE: effective roles from the GIVE itself
    assert take.command == "TAKE" and take.headers["job"] == str(first), take
    assert take.headers["more"] == "1", "the second job is ready"
    w.done(take)
    take = give(w, "2")  # the hot GIVE, right behind the DONE
    assert take.command == "TAKE" and take.headers["job"] == str(second), take
    assert "more" not in take.headers, "nothing is left"
    w.done(take)
    w.send("READY", headers(roles="resize"))
    w.quiet(0.3)
    third = bs.put(b"three")
    take = w.give_when_woken("resize", lock="3")
    assert take.headers["job"] == str(third)
    w.done(take)


def test_a_hot_give_on_a_queue_that_ran_dry_gets_no_and_the_ready_after_it_is_woken(manager, ctx):
    bs = beanstalk(manager)
    bs.put(b"one")
    bs.put(b"two")
    w = Dealer(ctx, manager.wmp)
    take = give(w, "1")
    assert take.headers["more"] == "1"
    bs.reserve(timeout=5)  # a beanstalkd worker takes the other job meanwhile
    w.done(take)
    no = give(w, "2")
    assert (no.command, no.headers["lock"]) == ("NO", "2")
    w.send("READY", headers(roles="resize"))  # worker rule 5: NO to a hot GIVE, then READY
    w.quiet(0.3)  # nothing is ready: no WAKE
    job = bs.put(b"later")
    take = w.give_when_woken("resize", lock="3")
    assert take.command == "TAKE" and take.headers["job"] == str(job)


def test_a_hot_give_never_yields_a_job_outside_its_roles(manager, ctx):
    other = greenstalk.Client(manager.address, use="other")
    other.put(b"not yours")
    w = Dealer(ctx, manager.wmp)
    assert give(w, "1").command == "NO"


def test_hot_workers_drain_a_queue_with_three_messages_per_job(manager, ctx):
    """Two pyzmq workers following rule 5 drain 40 jobs; past each worker's first job every
    job costs DONE, GIVE and TAKE, and no job is lost or run twice."""
    bs = beanstalk(manager)
    jobs = {str(bs.put(b"%d" % i)) for i in range(40)}
    workers = [Dealer(ctx, manager.wmp) for _ in range(2)]
    for i, w in enumerate(workers):
        w.send("GIVE", headers(lock=f"{i}-0", roles="resize", queue="resize"))
    got, nos = [], 0
    active = set(range(2))
    while active:
        for i in sorted(active):
            w = workers[i]
            reply = w.recv()
            if reply.command == "NO":
                nos += 1
                active.discard(i)
                continue
            assert reply.command == "TAKE", reply
            got.append(reply.headers["job"])
            w.done(reply)
            if reply.headers.get("more") == "1":
                w.send("GIVE", headers(lock=f"{i}-{len(got)}", roles="resize", queue="resize"))
            else:
                active.discard(i)
    assert sorted(got) == sorted(jobs), "each job exactly once"
    assert nos <= 2, "at most one NO per worker when the queue runs dry"


# -- the Rust SDK and the Python example ---------------------------------------------------


def sdk_worker(procs, jobyard_bin, endpoint):
    return procs([jobyard_bin, "wmp-worker", "--connect", endpoint, "--role", "up", "--",
                  "tr", "a-z", "A-Z"])


def example_worker(procs, _bin, endpoint):
    return procs([sys.executable, EXAMPLE, "--connect", endpoint, "--role", "up"])


def take(m, path, lock, job, body, more):
    extra = {"more": 1} if more else {}
    m.send(path, "TAKE", headers(lock=lock, manager=m.name, job=job, attempt=1, queue="up",
                                 timeout=60000, **extra), body)


@pytest.mark.parametrize("start", [sdk_worker, example_worker], ids=["sdk", "example"])
def test_the_worker_sends_a_hot_give_after_done_and_ready_after_its_no(routers, procs,
                                                                        jobyard_bin, start):
    m = routers()
    start(procs, jobyard_bin, m.endpoint)
    path = m.recv(timeout=10).path
    m.send(path, "WAKE", headers(queue="up", manager="m1"))
    lock = m.recv(skip=("READY",)).headers["lock"]
    take(m, path, lock, 1, b"one", more=True)
    done = m.recv(skip=("READY",))
    assert (done.command, done.payload) == ("DONE", b"ONE")
    hot = m.recv()
    assert hot.command == "GIVE", f"a hot GIVE right after the DONE, not {hot}"
    assert (hot.path, hot.headers["queue"], hot.headers["roles"]) == (path, "up", "up")
    assert hot.headers["lock"] != lock
    # Its TAKE runs; this one says nothing about more, so READY follows the DONE.
    take(m, path, hot.headers["lock"], 2, b"two", more=False)
    done = m.recv()
    assert (done.command, done.headers["job"]) == ("DONE", "2")
    assert m.recv().command == "READY"
    # And a NO to a hot GIVE is followed by READY.
    m.send(path, "WAKE", headers(queue="up", manager="m1"))
    lock = m.recv(skip=("READY",)).headers["lock"]
    take(m, path, lock, 3, b"three", more=True)
    assert m.recv(skip=("READY",)).command == "DONE"
    hot = m.recv()
    assert hot.command == "GIVE"
    m.send(path, "NO", headers(lock=hot.headers["lock"], manager="m1"))
    assert m.recv().command == "READY"
