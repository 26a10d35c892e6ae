"""The gearman and gearadmin command-line tools (Debian gearman-tools) against jobyard."""

import subprocess

from conftest import need


def test_foreground_job_with_the_gearman_tool_worker(jobyard):
    need("gearman")
    worker = subprocess.Popen(
        ["gearman", "-h", "127.0.0.1", "-p", str(jobyard.gport), "-w", "-f", "rev", "-c", "1",
         "--", "rev"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        out = jobyard.gearman("-f", "rev", "hello world")
        assert out.returncode == 0, out.stderr
        assert out.stdout.decode().strip() == "dlrow olleh"
        assert worker.wait(timeout=60) == 0
    finally:
        worker.kill()


def test_background_jobs_status_and_admin_views(jobyard):
    need("gearadmin")
    for i in range(3):
        out = jobyard.gearman("-b", "-f", "bg", f"job{i}")
        assert out.returncode == 0, out.stderr
    out = jobyard.gearman("-b", "-I", "-f", "bg", "high")  # -I: high priority
    assert out.returncode == 0, out.stderr
    assert jobyard.status()["bg"] == (4, 0, 0)
    prio = jobyard.gearadmin("--priority-status")
    assert "bg\t1\t3\t0\t0" in prio
    jobs = [l for l in jobyard.gearadmin("--show-jobs").splitlines() if l.startswith("H:")]
    assert len(jobs) == 4 and all(l.endswith("\t0\t0\t1") for l in jobs), jobs
    assert jobyard.gearadmin("--server-version").startswith("1.1.20")
    assert jobyard.gearadmin("--getpid").strip() == str(jobyard.proc.pid)
    assert "OK" in jobyard.gearadmin("--create-function", "made")
    assert "made" in jobyard.status()
    assert "OK" in jobyard.gearadmin("--drop-function", "made")
    assert "made" not in jobyard.status()
    handle = jobs[0].split("\t")[0]
    assert "OK" in jobyard.gearadmin("--cancel-job", handle)
    assert jobyard.status()["bg"] == (3, 0, 0)
    # A gearman tool worker drains them, highest priority first.
    out = jobyard.gearman("-w", "-f", "bg", "-c", "3", "--", "cat")
    assert out.returncode == 0, out.stderr
    assert jobyard.status()["bg"] == (0, 0, 0)


def test_workers_listing_shows_functions(jobyard):
    need("gearman")
    worker = subprocess.Popen(
        ["gearman", "-h", "127.0.0.1", "-p", str(jobyard.gport), "-w", "-f", "listed",
         "--", "cat"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        jobyard.wait_for(lambda: " 127.0.0.1 - : listed\n" in jobyard.gearadmin("--workers"),
                         "the worker to register")
        assert jobyard.status()["listed"][2] == 1
    finally:
        worker.kill()
        worker.wait()
    jobyard.wait_for(lambda: jobyard.status()["listed"][2] == 0, "the worker to go away")
