"""Every TCP listener of the real binary asks the kernel for the same backlog (4096, capped
by net.core.somaxconn), not the 128 of tokio's, mio's or std's defaults: beanstalkd,
Gearman, HTTP, the 14/WMP manager, and jobd-master (the jobd worker's listeners are in
tests/jobd/test_jobd_backlog.py, beside the MariaDB they need). Read as `ss -ltn` shows
it: a listening socket's Send-Q is its backlog."""

from __future__ import annotations

import subprocess
import time

import pytest

from jobyard_testlib import HOST, expected_backlog, free_port, listen_backlog



def test_every_listener_of_serve_has_the_burst_backlog(start_server):
    gearman, http, wmp = free_port(), free_port(), free_port()
    srv = start_server(extra_args=(
        "--gearman-listen", f"{HOST}:{gearman}",
        "--http-listen", f"{HOST}:{http}",
        "--wmp-listen", f"tcp://{HOST}:{wmp}",
    ))
    ports = {"beanstalkd": srv.address[1], "gearman": gearman, "http": http, "wmp": wmp}
    got = {name: listen_backlog(port) for name, port in ports.items()}
    assert got == {name: expected_backlog() for name in ports}


def test_jobd_master_listens_with_the_burst_backlog(jobyard_bin, tmp_path):
    port = free_port()
    config = tmp_path / "master.conf"
    config.write_text(f"host = {HOST}\nport = {port}\n")
    proc = subprocess.Popen([str(jobyard_bin), "jobd-master", "--config", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True,
                                 text=True, timeout=30).stdout.strip():
            if proc.poll() is not None:
                pytest.fail(f"jobd-master exited: {proc.stderr.read()!r}")
            assert time.monotonic() < deadline, "jobd-master did not listen"
            time.sleep(0.05)
        assert listen_backlog(port) == expected_backlog()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()
