"""The jobd worker's listener asks the kernel for every jobyard listener's backlog (4096,
capped by net.core.somaxconn), not tokio's 128: standalone (`jobyard jobd`) and inside
`jobyard serve --jobd-config`. Read as `ss -ltn` shows it (Send-Q); jobd-master's is in
tests/test_listen_backlog.py."""

from __future__ import annotations


from jobdlib import serve_with_jobd
from jobyard_testlib import expected_backlog, listen_backlog



def test_a_standalone_jobd_listens_with_the_burst_backlog(jobd):
    daemon = jobd()
    assert listen_backlog(daemon.port) == expected_backlog()


def test_jobd_inside_serve_listens_with_the_burst_backlog(start_server, jobs_db, tmp_path):
    _, jobd_port, _ = serve_with_jobd(start_server, jobs_db, tmp_path, "t1 = 1")
    assert listen_backlog(jobd_port) == expected_backlog()
