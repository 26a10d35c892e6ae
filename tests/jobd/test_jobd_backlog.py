"""The jobd worker's listener asks the kernel for every jobyard listener's backlog (4096,
capped by net.core.somaxconn), not tokio's 128: standalone (`jobyard jobd`) and inside
`jobyard serve --jobd-config`. Read as `ss -ltn` shows it (Send-Q); jobd-master's is in
tests/test_listen_backlog.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

from jobdlib import serve_with_jobd

LISTEN_BACKLOG = 4096  # crates/net/src/listen.rs


def expected_backlog() -> int:
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    return min(LISTEN_BACKLOG, somaxconn)


def listen_backlog(port: int) -> int:
    """The backlog of the socket listening on `port` (`ss -ltn`'s Send-Q)."""
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    lines = out.splitlines()
    assert lines, f"nothing listens on {port}"
    return int(lines[0].split()[2])


def test_a_standalone_jobd_listens_with_the_burst_backlog(jobd):
    daemon = jobd()
    assert listen_backlog(daemon.port) == expected_backlog()


def test_jobd_inside_serve_listens_with_the_burst_backlog(start_server, jobs_db, tmp_path):
    _, jobd_port, _ = serve_with_jobd(start_server, jobs_db, tmp_path, "t1 = 1")
    assert listen_backlog(jobd_port) == expected_backlog()
