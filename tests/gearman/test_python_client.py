"""The Python gearman3 client and worker (PyPI) against jobyard: foreground and background
jobs, status, data and exceptions, coalescing, a worker killed mid-job, and a restart."""

import os
import signal

import pytest

pytest.importorskip("gearman")
from gearman_py3 import gearman  # noqa: E402

from conftest import python_worker  # noqa: E402


def text(b):
    return b.decode() if isinstance(b, bytes) else b


@pytest.fixture
def worker(jobyard):
    proc = python_worker(jobyard)
    jobyard.wait_for(lambda: jobyard.status().get("reverse", (0, 0, 0))[2] >= 1, "worker")
    yield proc
    proc.kill()
    proc.wait()


def test_worker_client_id_is_listed(jobyard, worker):
    assert " py-worker : hang explode reverse" in jobyard.gearadmin("--workers")


def test_foreground_job_gets_status_data_and_result(jobyard, worker):
    client = gearman.GearmanClient([jobyard.addr])
    req = client.submit_job("reverse", "abc", poll_timeout=60)
    assert req.complete and req.state == gearman.JOB_COMPLETE
    assert text(req.result) == "cba"
    assert [text(d) for d in req.data_updates] == ["partial"]
    assert int(req.status["numerator"]) == 1 and int(req.status["denominator"]) == 2


def test_exceptions_reach_the_client(jobyard, worker):
    client = gearman.GearmanClient([jobyard.addr])
    req = client.submit_job("explode", "x", poll_timeout=60)
    assert req.state in (gearman.JOB_FAILED,)
    assert req.timed_out is False


def test_background_job_and_status(jobyard):
    client = gearman.GearmanClient([jobyard.addr])
    req = client.submit_job("later", "payload", background=True, wait_until_complete=False,
                            poll_timeout=60)
    assert req.job.handle
    req = client.get_job_status(req, poll_timeout=60)
    # gearman3 compares the reply's bytes with str, so read the raw fields it stored.
    assert req.status["handle"] == req.job.handle
    assert jobyard.status()["later"] == (1, 0, 0)


def test_coalescing_by_unique(jobyard):
    client = gearman.GearmanClient([jobyard.addr])
    a = client.submit_job("co", "1", unique="same", background=True, wait_until_complete=False,
                          poll_timeout=60)
    b = client.submit_job("co", "2", unique="same", background=True, wait_until_complete=False,
                          poll_timeout=60)
    assert a.job.handle and a.job.handle == b.job.handle
    assert jobyard.status()["co"] == (1, 0, 0)


def test_worker_killed_mid_job_is_replaced(jobyard, tmp_path):
    marker = tmp_path / "marker"
    victim = python_worker(jobyard, str(marker))
    client = gearman.GearmanClient([jobyard.addr])
    req = client.submit_job("hang", "important", background=True, wait_until_complete=False,
                            poll_timeout=60)
    assert req.job.handle, "no JOB_CREATED"
    jobyard.wait_for(marker.exists, "the first worker to take the job")
    assert jobyard.status()["hang"][:2] == (1, 1)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    jobyard.wait_for(lambda: jobyard.status()["hang"][:2] == (1, 0), "the job to be requeued")
    # A second worker (the gearman tool) finishes it.
    done = tmp_path / "done"
    out = jobyard.gearman("-w", "-f", "hang", "-c", "1", "--", "sh", "-c", f"cat > {done}")
    assert out.returncode == 0, out.stderr
    assert done.read_text() == "important"
    assert jobyard.status()["hang"][:2] == (0, 0)


def test_background_jobs_survive_a_restart(jobyard, tmp_path):
    client = gearman.GearmanClient([jobyard.addr])
    for i in range(5):
        req = client.submit_job("durable", f"job{i}", background=True,
                                wait_until_complete=False, poll_timeout=60)
        assert req.job.handle, "no JOB_CREATED"
    jobyard.restart()  # SIGKILL, then start on the same data directory
    assert jobyard.status()["durable"] == (5, 0, 0)
    done = tmp_path / "done"
    out = jobyard.gearman("-w", "-f", "durable", "-c", "5", "--", "sh", "-c",
                          f"cat >> {done}; echo >> {done}")
    assert out.returncode == 0, out.stderr
    assert sorted(done.read_text().split()) == [f"job{i}" for i in range(5)]
    assert jobyard.status()["durable"] == (0, 0, 0)
