"""Fixtures: the real jobyard binary, and real servers on free loopback ports.

* `jobyard_bin`: $JOBYARD_BIN or target/debug/jobyard (build it with `cargo build -p jobyard`).
* `start_server(fsync=..., extra_args=..., data_dir=...)`: starts a server and returns a
  `Server` (see jobyard_testlib) with `.address`, `.restart()`, `.restart(crash=True)`,
  `.kill9()`, `.stop()`; every server it started is stopped at teardown.
* `server`: one server with `--fsync always` on a fresh data directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jobyard_testlib import Server, binary_path  # noqa: E402


@pytest.fixture(scope="session")
def jobyard_bin() -> Path:
    path = binary_path()
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(
            f"jobyard binary not found at {path}: build it with `cargo build -p jobyard` "
            "or point JOBYARD_BIN at it",
            pytrace=False,
        )
    return path


@pytest.fixture
def start_server(jobyard_bin, tmp_path):
    servers = []
    count = [0]

    def start(fsync="always", extra_args=(), data_dir=None) -> Server:
        count[0] += 1
        if data_dir is None:
            data_dir = tmp_path / f"data{count[0]}"
        srv = Server(jobyard_bin, data_dir, tmp_path, fsync=fsync, extra_args=extra_args)
        servers.append(srv)
        return srv.start()

    yield start
    for srv in servers:
        code = srv.stop()
        # Shown by pytest only when the test failed.
        print(f"--- jobyard server log ({srv.log_path}), exit {code}:\n{srv.log_tail()}")


@pytest.fixture
def server(start_server) -> Server:
    return start_server()
