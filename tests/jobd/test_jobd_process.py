"""`jobyard jobd` as a process: kill -9 with jobs running strands no row, SIGTERM shuts
down gracefully, and the binary answers to the jobd / jobd-master / jobctl names."""

from __future__ import annotations

import os
import subprocess
import time

from jobdlib import pid_alive as _pid_alive


def _wait_file(p, timeout=30):
    deadline = time.time() + timeout
    while not p.exists():
        assert time.time() < deadline, f"{p} never appeared"
        time.sleep(0.02)


def test_kill9_with_jobs_running_strands_no_row(jobd, jobs_db, tmp_path, jobyard_bin):
    w = jobd(targets="t1 = 1")
    running = jobs_db.insert("t1")
    queued = jobs_db.insert("t1")
    (tmp_path / f"job-{running}.sh").write_text('echo $$ > "$d/pid"; touch "$d/started"; sleep 300\n')
    subprocess.run([str(jobyard_bin), "jobctl", "--port", str(w.port), "poll", "t1"],
                   check=True, capture_output=True, timeout=60)
    _wait_file(tmp_path / "started")
    launcher = int((tmp_path / "pid").read_text())
    assert jobs_db.row(running)["status"] == "running"
    w.kill9()
    # The launcher dies with the daemon (parent-death signal), so nothing runs unrecorded.
    deadline = time.time() + 10
    while _pid_alive(launcher):
        assert time.time() < deadline, "launcher outlived kill -9 of jobd"
        time.sleep(0.02)
    w.start()
    r = jobs_db.row(running)
    assert r["status"] == "done" and r["result"] == "fail"
    assert "worker stopped while this job was running" in r["stderr"]
    assert jobs_db.row(queued)["status"] == "waiting"
    subprocess.run([str(jobyard_bin), "jobctl", "--port", str(w.port), "poll", "t1"],
                   check=True, capture_output=True, timeout=60)
    assert jobs_db.wait_status(queued, "done")["result"] == "ok"


def test_sigterm_lets_running_jobs_finish_and_exits_0(jobd, jobs_db, tmp_path, jobyard_bin):
    w = jobd(targets="t1 = 1")
    job = jobs_db.insert("t1")
    later = jobs_db.insert("t1")
    (tmp_path / f"job-{job}.sh").write_text('touch "$d/started"; sleep 0.5; echo finished\n')
    subprocess.run([str(jobyard_bin), "jobctl", "--port", str(w.port), "poll", "t1"],
                   check=True, capture_output=True, timeout=60)
    _wait_file(tmp_path / "started")
    assert w.stop() == 0
    r = jobs_db.row(job)
    assert (r["status"], r["result"], r["stdout"].strip()) == ("done", "ok", "finished")
    assert jobs_db.row(later)["status"] == "waiting"


def test_argv0_names(jobyard_bin, tmp_path):
    for name in ("jobd", "jobd-master", "jobctl"):
        link = tmp_path / name
        os.symlink(jobyard_bin, link)
        out = subprocess.run([str(link), "--help"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "Usage" in out.stdout
    bad = tmp_path / "bad.conf"
    bad.write_text("port = 7080\n")
    out = subprocess.run([str(tmp_path / "jobd"), "--config", str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip() == "config parsing error: 'host' is not defined"


def test_jobctl_password_prompt_and_config(jobd, jobyard_bin, tmp_path):
    w = jobd(targets="t1 = 2", extra="password = s3cret")
    out = subprocess.run(
        [str(jobyard_bin), "jobctl", "--password", "--port", str(w.port), "list-targets"],
        input="s3cret\n", capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "TARGET" in out.stdout and "t1" in out.stdout
    conf = tmp_path / "jobctl.conf"
    conf.write_text(f"port = {w.port}\npassword = \"s3cret\"\n")
    out = subprocess.run(
        [str(jobyard_bin), "jobctl", "--config", str(conf), "pause", "t1"],
        capture_output=True, text=True, timeout=60,
    )
    assert (out.returncode, out.stdout) == (0, "ok\n"), out.stderr
    out = subprocess.run(
        [str(jobyard_bin), "jobctl", "--port", str(w.port), "list-targets"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(tmp_path / "none")},
    )
    assert out.returncode == 0
    assert out.stderr.strip() == "ERROR [jobctl] Worker error: invalid password"
