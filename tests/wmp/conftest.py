"""Fixtures for the WMP tests: a zmq context, and starters for the real jobyard worker and
device processes (stopped at teardown)."""

from __future__ import annotations

import pytest

zmq = pytest.importorskip("zmq")

from wmplib import Proc, Router  # noqa: E402


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.destroy(linger=0)


@pytest.fixture
def routers(ctx):
    made = []

    def make(endpoint=None, name=None):
        r = Router(ctx, endpoint, name or f"m{len(made) + 1}")
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


@pytest.fixture
def procs():
    made = []

    def start(argv, env=None):
        p = Proc([str(a) for a in argv], env)
        made.append(p)
        return p

    yield start
    for p in made:
        if p.alive():
            p.p.kill()
            p.p.wait()
