"""Fixtures for the PostgreSQL storage tests: one real PostgreSQL cluster per session
(tests/pg_testlib.py), a fresh database per test, and `start_pg_server` to run the real
jobyard with `--storage postgres://...` on it (the password through PGPASSWORD)."""

from __future__ import annotations

import secrets
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pg_testlib import Postgres  # noqa: E402


@pytest.fixture(scope="session")
def postgres():
    pg = Postgres().start()
    yield pg
    pg.destroy()


@pytest.fixture
def pg_url(postgres, monkeypatch) -> str:
    """A URL of a fresh database, without password: the server gets it from PGPASSWORD.
    A test that stopped PostgreSQL finds it running again for the next one."""
    if postgres.proc is None or postgres.proc.poll() is not None:
        postgres.start()
    monkeypatch.setenv("PGPASSWORD", postgres.password)
    db = postgres.create_database("t_" + secrets.token_hex(6))
    return postgres.url(db)


@pytest.fixture
def start_pg_server(start_server, pg_url):
    """Starts `jobyard serve --storage <pg_url>` (more flags in `extra_args`)."""

    def start(extra_args=(), url=None):
        return start_server(extra_args=("--storage", url or pg_url, *extra_args))

    return start


@pytest.fixture
def pg_node(jobyard_bin, tmp_path, pg_url):
    """Makes (without starting) more nodes on the same storage as `start_pg_server`'s:
    `Server` objects to start as standbys (tests/pg_testlib.py's `Standby`)."""
    from jobyard_testlib import Server

    nodes = []

    def make(extra_args=()):
        srv = Server(
            jobyard_bin,
            tmp_path / f"node{len(nodes)}",
            tmp_path,
            extra_args=("--storage", pg_url, *extra_args),
        )
        nodes.append(srv)
        return srv

    yield make
    for srv in nodes:
        if srv.running():
            srv.proc.send_signal(signal.SIGCONT)  # should a test have stopped it
        code = srv.stop()
        print(f"--- node log ({srv.log_path}), exit {code}:\n{srv.log_tail()}")
