"""jobd launches under a retry policy (docs/retries.md, "jobd"): inside `jobyard serve
--jobd-config`, a target is a queue, and `[queues.TARGET]` gives it a retry policy. A launch
that exits non-zero is a failed attempt: the row stays `running` and is launched again after
the backoff; after the last attempt it is written failed, and a dead letter with the exit
codes in its failures appears in the dead-letter queue (kept across kill -9). Without a
policy a failed launch ends its row at once, as in jobd."""

from __future__ import annotations

import subprocess

import requests

from jobdlib import poll, port_open, wait
from jobyard_testlib import free_port

# Launch N of a row (counted in `launches-<id>`) kills itself with SIGKILL if
# `kill-<id>-N` exists, waits for a signal if `block-<id>-N` exists, exits with the code in
# `exit-<id>-N` if that exists, else 0.
LAUNCHER = (
    'd=$(dirname "$0")\necho x >> "$d/launches-$1"\nn=$(wc -l < "$d/launches-$1")\n'
    'if [ -f "$d/kill-$1-$n" ]; then kill -KILL $$; fi\n'
    'if [ -f "$d/block-$1-$n" ]; then touch "$d/blocked-$1"; sleep 60; fi\n'
    'if [ -f "$d/exit-$1-$n" ]; then echo "attempt $n failed" >&2; exit $(cat "$d/exit-$1-$n"); fi\n'
    'echo "id=$1 attempt $n"\n'
)


def launches(tmp_path, row: int) -> int:
    f = tmp_path / f"launches-{row}"
    return len(f.read_text().splitlines()) if f.exists() else 0


def fail(tmp_path, row: int, attempt: int, code: int) -> None:
    (tmp_path / f"exit-{row}-{attempt}").write_text(str(code))


def serve(start_server, jobs_db, tmp_path):
    """A server whose jobd worker serves `retried` (max_attempts 3, dead letters to
    `retried-dead`) and `plain` (no policy). Returns it, the jobd port and the HTTP URL."""
    run = tmp_path / "run.sh"
    run.write_text(LAUNCHER)
    jobd_port, http_port = free_port(), free_port()
    cfg = tmp_path / "jobd.conf"
    cfg.write_text(
        f"host = 127.0.0.1\nport = {jobd_port}\nname = w1\n"
        f"mysql_host = 127.0.0.1\nmysql_port = {jobs_db.m.port}\nmysql_user = root\n"
        f"mysql_password = \"\"\nmysql_database = {jobs_db.name}\nmysql_table = jobs\n"
        f"launcher = /bin/sh {run} {{id}}\nshutdown_timeout = 2\n"
        "[targets]\nretried = 2\nplain = 1\n"
    )
    queues = tmp_path / "queues.toml"
    queues.write_text(
        '[queues.retried]\nmax_attempts = 3\nbackoff = "fixed"\nbackoff_ms = 200\n'
        'dead_letter = "retried-dead"\n'
    )
    srv = start_server(extra_args=["--jobd-config", str(cfg), "--queues", str(queues),
                                   "--http-listen", f"127.0.0.1:{http_port}"])
    wait(lambda: port_open(jobd_port), "the jobd listener")
    return srv, jobd_port, f"http://127.0.0.1:{http_port}"


def dead_letters(http: str) -> list:
    reply = requests.get(f"{http}/v1/queues/retried-dead/dead-letters", timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()["dead_letters"]


def test_failed_launches_are_retried_then_dead_lettered_with_their_exit_codes(
        start_server, jobs_db, tmp_path, jobyard_bin):
    srv, jobd_port, http = serve(start_server, jobs_db, tmp_path)
    flaky, doomed = jobs_db.insert("retried"), jobs_db.insert("retried")
    fail(tmp_path, flaky, 1, 3)
    fail(tmp_path, flaky, 2, 4)
    for attempt, code in [(1, 11), (2, 12), (3, 13)]:
        fail(tmp_path, doomed, attempt, code)
    poll(jobyard_bin, jobd_port, "retried")

    row = jobs_db.wait_status(flaky, "done")
    assert row["result"] == "ok" and row["return_code"] == "0", row
    assert row["stdout"].startswith(f"id={flaky} attempt 3"), row
    assert launches(tmp_path, flaky) == 3

    row = jobs_db.wait_status(doomed, "done")
    assert row["result"] == "fail" and row["return_code"] == "13", row
    assert launches(tmp_path, doomed) == 3

    letters = dead_letters(http)
    assert len(letters) == 1, letters
    letter = letters[0]
    assert letter["origin"] == "retried" and letter["failed_attempts"] == 3, letter
    errors = [f["error"] for f in letter["failures"]]
    assert errors == [f"worker w1: exit code {c}; stderr: attempt {n} failed"
                      for n, c in [(1, 11), (2, 12), (3, 13)]], errors
    assert all(f["how"] == "failed" and f["at_ms"] > 0 for f in letter["failures"]), letter
    # The flaky row's failures went with its success: no dead letter for it.

    # The dead letter is durable: a kill -9 keeps it.
    srv.restart(crash=True)
    wait(lambda: port_open(jobd_port), "the jobd listener after the restart")
    assert [d["id"] for d in dead_letters(http)] == [letter["id"]]
    discarded = requests.post(f"{http}/v1/queues/retried-dead/dead-letters/discard",
                              json={}, timeout=10)
    assert discarded.json()["count"] == 1, discarded.text
    assert dead_letters(http) == []


def test_without_a_policy_a_failed_launch_ends_its_row_at_once(
        start_server, jobs_db, tmp_path, jobyard_bin):
    srv, jobd_port, http = serve(start_server, jobs_db, tmp_path)
    row_id = jobs_db.insert("plain")
    fail(tmp_path, row_id, 1, 7)
    poll(jobyard_bin, jobd_port, "plain")
    row = jobs_db.wait_status(row_id, "done")
    assert row["result"] == "fail" and row["return_code"] == "7", row
    assert "attempt 1 failed" in row["stderr"], row
    assert launches(tmp_path, row_id) == 1
    assert dead_letters(http) == []


def test_a_killed_launch_is_an_attempt_but_an_operators_signal_is_not(
        start_server, jobs_db, tmp_path, jobyard_bin):
    srv, jobd_port, http = serve(start_server, jobs_db, tmp_path)
    killed, stopped = jobs_db.insert("retried"), jobs_db.insert("retried")
    (tmp_path / f"kill-{killed}-1").touch()
    (tmp_path / f"block-{stopped}-1").touch()
    poll(jobyard_bin, jobd_port, "retried")

    row = jobs_db.wait_status(killed, "done")
    assert row["result"] == "ok", row
    assert launches(tmp_path, killed) == 2, "killed by SIGKILL once, then launched again"

    wait(lambda: (tmp_path / f"blocked-{stopped}").exists(), "the blocking launch")
    sent = subprocess.run([str(jobyard_bin), "jobctl", "--port", str(jobd_port),
                           "send-signal", str(stopped), "SIGTERM"],
                          capture_output=True, text=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    row = jobs_db.wait_status(stopped, "done")
    assert (row["result"], row["sig"]) == ("fail", "SIGTERM"), row
    assert launches(tmp_path, stopped) == 1, "the operator stopped it: no retry"
    assert dead_letters(http) == []
